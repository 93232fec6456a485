// Adding knowledge by hand: a memory (`remember`), an entity
// (`upsertEntity`) and a relation from one entity to another (`relate`).
// Each form reports what the server made of it (a merged near-duplicate,
// an existing entity or relation updated) and its errors inline.

import { useState } from "react";
import { useMutation, useQuery } from "urql";

import { href } from "../router";
import { ErrorBox } from "../ui";
import { graphql } from "../graphql";

const REMEMBER = graphql(`
  mutation ($input: RememberInput!) {
    remember(input: $input) {
      memory {
        id
      }
      merged
    }
  }
`);
const UPSERT = graphql(`
  mutation ($input: UpsertEntityInput!) {
    upsertEntity(input: $input) {
      entity {
        id
        name
      }
    }
  }
`);
const RELATE = graphql(`
  mutation ($input: RelateInput!) {
    relate(input: $input) {
      relation {
        id
      }
      created
    }
  }
`);
const NAMED = graphql(`
  query ($name: String) {
    entities(first: 20, filter: { nameContains: $name }) {
      edges {
        node {
          id
          name
          type
        }
      }
    }
  }
`);

export function RememberForm() {
  const [content, setContent] = useState("");
  const [category, setCategory] = useState("");
  const [result, remember] = useMutation(REMEMBER);
  const done = result.data?.remember;
  return (
    <form
      aria-label="Remember a fact"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await remember({
          input: { content: content.trim(), ...(category.trim() ? { category: category.trim() } : {}) },
        });
        if (answer.data) setContent("");
      }}
    >
      <label htmlFor="remember-content">A fact to remember</label>
      <textarea id="remember-content" rows={3} value={content} onChange={(e) => setContent(e.target.value)} />
      <label htmlFor="remember-category">Category (optional: insight, event, preference…)</label>
      <input id="remember-category" value={category} onChange={(e) => setCategory(e.target.value)} />
      <button type="submit" disabled={!content.trim() || result.fetching}>
        Remember
      </button>
      {result.error && <ErrorBox error={result.error} />}
      {done && !result.error && (
        <p className="state" role="status">
          {done.merged ? "Merged into a near-duplicate: " : "Remembered: "}
          <a href={href({ page: "memory-detail", id: done.memory.id })}>open it</a>.
        </p>
      )}
    </form>
  );
}

export function NewEntityForm({ onCreated }: { onCreated: (id: string) => void }) {
  const [type, setType] = useState("");
  const [name, setName] = useState("");
  const [result, upsert] = useMutation(UPSERT);
  return (
    <form
      aria-label="New entity"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await upsert({ input: { type: type.trim(), name: name.trim() } });
        if (answer.data) {
          setName("");
          onCreated(answer.data.upsertEntity.entity.id);
        }
      }}
    >
      <h2>New entity</h2>
      <label htmlFor="entity-type">Type</label>
      <input id="entity-type" value={type} onChange={(e) => setType(e.target.value)} placeholder="e.g. person" />
      <label htmlFor="entity-name">Name</label>
      <input id="entity-name" value={name} onChange={(e) => setName(e.target.value)} />
      <button type="submit" disabled={!type.trim() || !name.trim() || result.fetching}>
        Add entity
      </button>
      {result.error && <ErrorBox error={result.error} />}
    </form>
  );
}

/** Relate the entity shown (`fromId`) to another, found by name. */
export function RelateForm({ fromId, onRelated }: { fromId: string; onRelated: () => void }) {
  const [type, setType] = useState("");
  const [name, setName] = useState("");
  const [toId, setToId] = useState("");
  const [found] = useQuery({
    query: NAMED,
    variables: { name: name || null },
    pause: !name,
  });
  const candidates = (found.data?.entities.edges ?? []).map((e) => e.node).filter((n) => n.id !== fromId);
  const [result, relate] = useMutation(RELATE);
  return (
    <form
      aria-label="Relate"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await relate({ input: { type: type.trim(), fromId, toId } });
        if (answer.data) onRelated();
      }}
    >
      <h3>Relate to another entity</h3>
      <label htmlFor="relation-type">Relation</label>
      <input id="relation-type" value={type} onChange={(e) => setType(e.target.value)} placeholder="e.g. works_at" />
      <label htmlFor="relation-target-name">To the entity named</label>
      <input id="relation-target-name" value={name} onChange={(e) => setName(e.target.value)} />
      <label htmlFor="relation-target">Pick it</label>
      <select id="relation-target" value={toId} onChange={(e) => setToId(e.target.value)}>
        <option value="">—</option>
        {candidates.map((n) => (
          <option key={n.id} value={n.id}>
            {n.name} ({n.type})
          </option>
        ))}
      </select>
      <button type="submit" disabled={!type.trim() || !toId || result.fetching}>
        Relate
      </button>
      {result.error && <ErrorBox error={result.error} />}
      {result.data && !result.error && (
        <p className="state" role="status">
          {result.data.relate.created ? "Related." : "That relation existed; updated."}
        </p>
      )}
    </form>
  );
}
