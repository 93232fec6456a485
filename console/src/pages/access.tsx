// Access: the tenant's API keys (a new key's secret is shown once, and
// until the keys change) and its audit log, newest first, paged, filtered
// by action, actor and days (kept in the URL), read again after each change
// made here.

import { useEffect, useMemo, useState } from "react";
import { useMutation, useQuery } from "urql";

import { DayFilter, FilterText } from "../filters";
import { type Cursor, Pager, pageArgs } from "../paging";
import { type AuditFilter, dayRange, href } from "../router";
import { Empty, ErrorBox, Json, Loading, when } from "../ui";
import { graphql } from "../graphql";

const KEYS = graphql(`
  {
    apiKeys(first: 100) {
      edges {
        node {
          id
          name
          prefix
          scopes
          createdBy
          createdAt
          lastUsedAt
          revoked
        }
      }
    }
  }
`);
const CREATE = graphql(`
  mutation ($name: String!, $scopes: [String!]!) {
    createApiKey(input: { name: $name, scopes: $scopes }) {
      apiKey {
        id
      }
      secret
    }
  }
`);
const REVOKE = graphql(`
  mutation ($id: ID!) {
    revokeApiKey(input: { id: $id }) {
      apiKey {
        id
        revoked
      }
    }
  }
`);
const AUDIT = graphql(`
  query ($filter: AuditLogFilter, $first: Int, $after: String, $last: Int, $before: String) {
    auditLog(filter: $filter, first: $first, after: $after, last: $last, before: $before, orderBy: CREATED_AT_DESC) {
      edges {
        node {
          id
          action
          actor
          target
          data
          createdAt
          verified
        }
      }
      pageInfo {
        hasNextPage
        hasPreviousPage
        startCursor
        endCursor
      }
    }
  }
`);
const AUDIT_PAGE = 50;

export function AccessPage({ filter }: { filter: AuditFilter }) {
  const [{ data, error, fetching }, reload] = useQuery({
    query: KEYS,
    requestPolicy: "network-only",
  });
  const [name, setName] = useState("");
  const [scopes, setScopes] = useState("tasks:read");
  const [secret, setSecret] = useState<string | null>(null);
  // Bumped by each change made here: the audit log reads again.
  const [changes, setChanges] = useState(0);
  const [created, create] = useMutation(CREATE);
  const [revoked, revoke] = useMutation(REVOKE);
  return (
    <section aria-labelledby="access-title">
      <h1 id="access-title">Access</h1>
      <h2>API keys</h2>
      <form
        className="start"
        aria-label="New API key"
        onSubmit={async (e) => {
          e.preventDefault();
          const answer = await create({
            name,
            scopes: scopes.split(/[\s,]+/).filter(Boolean),
          });
          if (answer.data) {
            setSecret(answer.data.createApiKey.secret);
            setName("");
            reload({ requestPolicy: "network-only" });
            setChanges((n) => n + 1);
          }
        }}
      >
        <label htmlFor="key-name">Name</label>
        <input id="key-name" value={name} onChange={(e) => setName(e.target.value)} />
        <label htmlFor="key-scopes">Scopes</label>
        <input id="key-scopes" value={scopes} onChange={(e) => setScopes(e.target.value)} />
        <button type="submit" disabled={!name.trim() || created.fetching}>
          Create key
        </button>
      </form>
      {created.error && <ErrorBox error={created.error} />}
      {secret && (
        <p className="state secret" role="status" data-testid="secret">
          The key's secret, shown this once: <code>{secret}</code>
        </p>
      )}
      {error ? (
        <ErrorBox error={error} />
      ) : fetching && !data ? (
        <Loading what="API keys" />
      ) : !data?.apiKeys.edges.length ? (
        <Empty>No API keys.</Empty>
      ) : (
        <table className="list" aria-label="API keys">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Prefix</th>
              <th scope="col">Scopes</th>
              <th scope="col">Last used</th>
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {data.apiKeys.edges.map(({ node: k }) => (
              <tr key={k.id} data-testid="api-key">
                <td>{k.name}</td>
                <td>
                  <code>{k.prefix}</code>
                </td>
                <td>{k.scopes.join(", ")}</td>
                <td>{when(k.lastUsedAt)}</td>
                <td>
                  {k.revoked ? (
                    "revoked"
                  ) : (
                    <button
                      aria-label={`Revoke ${k.name}`}
                      disabled={revoked.fetching}
                      onClick={async () => {
                        if (!confirm(`Revoke the key "${k.name}"? Requests with it are refused at once.`)) return;
                        await revoke({ id: k.id });
                        // The one-time secret belonged to the keys as they were.
                        setSecret(null);
                        reload({ requestPolicy: "network-only" });
                        setChanges((n) => n + 1);
                      }}
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {revoked.error && <ErrorBox error={revoked.error} />}
      <AuditLog changes={changes} filter={filter} />
    </section>
  );
}

function AuditLog({ changes, filter }: { changes: number; filter: AuditFilter }) {
  const [cursor, setCursor] = useState<Cursor>(null);
  // A new filter starts from the newest page.
  useEffect(() => setCursor(null), [filter.action, filter.actor, filter.from, filter.to]);
  const variables = useMemo(() => {
    const { after, before } = dayRange(filter.from, filter.to);
    const auditFilter = {
      ...(filter.action ? { actionPrefix: filter.action } : {}),
      ...(filter.actor ? { actor: filter.actor } : {}),
      ...(after ? { since: after } : {}),
      ...(before ? { until: before } : {}),
    };
    return { filter: Object.keys(auditFilter).length ? auditFilter : null, ...pageArgs(cursor, AUDIT_PAGE) };
  }, [filter.action, filter.actor, filter.from, filter.to, cursor]);
  const setFilter = (change: Partial<AuditFilter>) => {
    location.hash = href({ page: "access", ...filter, ...change });
  };
  const filteredLog = Boolean(filter.action || filter.actor || filter.from || filter.to);
  const [{ data, error, fetching }, reload] = useQuery({ query: AUDIT, variables, requestPolicy: "network-only" });
  useEffect(() => {
    if (changes > 0) {
      setCursor(null);
      reload({ requestPolicy: "network-only" });
    }
  }, [changes, reload]);
  return (
    <>
      <h2>Audit log</h2>
      <div className="toolbar">
        <FilterText
          id="audit-action"
          label="Action starts with"
          value={filter.action}
          onCommit={(action) => setFilter({ action })}
        />
        <FilterText id="audit-actor" label="Actor" value={filter.actor} onCommit={(actor) => setFilter({ actor })} />
        <DayFilter id="audit-from" label="From" value={filter.from} onChange={(from) => setFilter({ from })} />
        <DayFilter id="audit-to" label="to" value={filter.to} onChange={(to) => setFilter({ to })} />
      </div>
      {error ? (
        <ErrorBox error={error} />
      ) : fetching && !data ? (
        <Loading what="the audit log" />
      ) : !data?.auditLog.edges.length ? (
        <Empty>{filteredLog ? "No entry matches these filters." : "Nothing recorded yet."}</Empty>
      ) : (
        <table className="list" aria-label="Audit log">
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Action</th>
              <th scope="col">Actor</th>
              <th scope="col">Target</th>
              <th scope="col">Data</th>
            </tr>
          </thead>
          <tbody>
            {data.auditLog.edges.map(({ node: a }) => (
              <tr key={a.id}>
                <td>{when(a.createdAt)}</td>
                <td>
                  {a.action} {a.verified ? "" : "(hash does not verify)"}
                </td>
                <td>{a.actor}</td>
                <td>{a.target}</td>
                <td>
                  <Json value={a.data} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager
        label="Audit log pages"
        cursor={cursor}
        pageInfo={data?.auditLog.pageInfo}
        fetching={fetching}
        onPage={setCursor}
      />
    </>
  );
}
