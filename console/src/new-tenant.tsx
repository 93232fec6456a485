// A platform admin's form for a new tenant (`createTenant`): its slug and
// name; once made, the console acts in it.

import { useState } from "react";
import { useMutation } from "urql";

import { ErrorBox } from "./ui";
import { graphql } from "./graphql";

const CREATE = graphql(`
  mutation ($input: CreateTenantInput!) {
    createTenant(input: $input) {
      tenant {
        slug
      }
    }
  }
`);

export function NewTenant({ onCreated }: { onCreated: (slug: string) => void }) {
  const [slug, setSlug] = useState("");
  const [name, setName] = useState("");
  const [result, create] = useMutation(CREATE);
  return (
    <form
      aria-label="New tenant"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await create({ input: { slug: slug.trim(), name: name.trim() } });
        if (answer.data) onCreated(answer.data.createTenant.tenant.slug);
      }}
    >
      <h2>New tenant</h2>
      <label htmlFor="tenant-slug">Slug (a-z, 0-9 and -)</label>
      <input id="tenant-slug" value={slug} onChange={(e) => setSlug(e.target.value)} />
      <label htmlFor="tenant-name">Name</label>
      <input id="tenant-name" value={name} onChange={(e) => setName(e.target.value)} />
      <button type="submit" disabled={!slug.trim() || !name.trim() || result.fetching}>
        Create tenant
      </button>
      {result.error && <ErrorBox error={result.error} />}
    </form>
  );
}
