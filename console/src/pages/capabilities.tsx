// Capabilities and connections: what the tenant subscribes to, and its
// connections to other systems. Secrets are write-only: the form sends
// one, the list only says whether a connection has one. The page polls
// while it is visible (neither has a subscription). The tools of its MCP
// servers are listed on demand (`mcp-tools`).

import { useState } from "react";
import { useMutation, useQuery } from "urql";

import { Polling, usePoll } from "../poll";
import { McpCatalogue } from "./mcp-tools";
import { Empty, ErrorBox, Json, Loading, Status, when } from "../ui";
import { graphql } from "../graphql";

const DATA = graphql(`
  {
    subscriptions(first: 100) {
      edges {
        node {
          id
          status
          active
          trialEndsAt
          capability {
            key
            name
            version
          }
        }
      }
    }
    connections(first: 100) {
      edges {
        node {
          id
          name
          kind
          config
          hasSecret
          updatedAt
        }
      }
    }
  }
`);
const CREATE = graphql(`
  mutation ($input: CreateConnectionInput!) {
    createConnection(input: $input) {
      connection {
        id
        name
        hasSecret
      }
    }
  }
`);

export function CapabilitiesPage() {
  const [{ data, error, fetching }, reload] = useQuery({ query: DATA, requestPolicy: "network-only" });
  const [name, setName] = useState("");
  const [kind, setKind] = useState("http");
  const [config, setConfig] = useState("{}");
  const [secret, setSecret] = useState("");
  const [invalid, setInvalid] = useState<string | null>(null);
  const [created, create] = useMutation(CREATE);
  const polling = usePoll(() => reload({ requestPolicy: "network-only" }));
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="capabilities" />;
  return (
    <section aria-labelledby="capabilities-title">
      <div className="heading">
        <h1 id="capabilities-title">Capabilities and connections</h1>
        <Polling on={polling} />
      </div>
      <h2>Subscriptions</h2>
      {!data?.subscriptions.edges.length ? (
        <Empty>This tenant subscribes to no capability.</Empty>
      ) : (
        <ul className="plain" aria-label="Subscriptions">
          {data.subscriptions.edges.map(({ node: s }) => (
            <li key={s.id}>
              {s.capability.name} (<code>{s.capability.key}</code> v{s.capability.version}) <Status status={s.status} />
              {s.trialEndsAt && ` trial ends ${when(s.trialEndsAt)}`}
            </li>
          ))}
        </ul>
      )}
      <h2>Connections</h2>
      {!data?.connections.edges.length ? (
        <Empty>No connections.</Empty>
      ) : (
        <table className="list" aria-label="Connections">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Kind</th>
              <th scope="col">Settings</th>
              <th scope="col">Secret</th>
            </tr>
          </thead>
          <tbody>
            {data.connections.edges.map(({ node: c }) => (
              <tr key={c.id} data-testid="connection">
                <td>{c.name}</td>
                <td>{c.kind}</td>
                <td>
                  <Json value={c.config} />
                </td>
                <td>{c.hasSecret ? "set (never shown)" : "none"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <McpCatalogue
        connections={(data?.connections.edges ?? []).filter((e) => e.node.kind === "mcp").map((e) => e.node.name)}
      />
      <form
        className="publish"
        aria-label="New connection"
        onSubmit={async (e) => {
          e.preventDefault();
          let parsedConfig: unknown;
          let parsedSecret: unknown = undefined;
          try {
            parsedConfig = JSON.parse(config || "{}");
            if (secret.trim()) parsedSecret = JSON.parse(secret);
          } catch (err) {
            setInvalid(`Settings and secret are JSON objects: ${String(err)}`);
            return;
          }
          setInvalid(null);
          const answer = await create({
            input: { name, kind, config: parsedConfig, ...(parsedSecret ? { secret: parsedSecret } : {}) },
          });
          if (!answer.error) {
            setName("");
            setSecret("");
            reload({ requestPolicy: "network-only" });
          }
        }}
      >
        <label htmlFor="connection-name">Name</label>
        <input id="connection-name" value={name} onChange={(e) => setName(e.target.value)} />
        <label htmlFor="connection-kind">Kind</label>
        <input id="connection-kind" value={kind} onChange={(e) => setKind(e.target.value)} />
        <label htmlFor="connection-config">Settings (JSON)</label>
        <textarea id="connection-config" rows={3} value={config} onChange={(e) => setConfig(e.target.value)} />
        <label htmlFor="connection-secret">Secret (JSON; write-only)</label>
        <textarea
          id="connection-secret"
          rows={2}
          value={secret}
          autoComplete="off"
          onChange={(e) => setSecret(e.target.value)}
        />
        <button type="submit" disabled={!name.trim() || created.fetching}>
          Create connection
        </button>
        {invalid && <ErrorBox error={invalid} />}
        {created.error && <ErrorBox error={created.error} />}
      </form>
    </section>
  );
}
