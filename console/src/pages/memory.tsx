// Memory: hybrid search with each hit's score breakdown, a form that
// remembers a fact, the tenant's memories newest first (25 a page, older
// and newer by cursor), and a memory's details with its versions and
// outcomes.

import { useMemo, useState } from "react";
import { useQuery } from "urql";

import { type Cursor, Pager, pageArgs } from "../paging";
import { href } from "../router";
import { Empty, ErrorBox, Loading, when } from "../ui";
import { RememberForm } from "./create-knowledge";
import { graphql } from "../graphql";

const SEARCH = graphql(`
  query ($q: String!) {
    searchMemories(query: $q, limit: 20) {
      vectorUsed
      hits {
        keywordRank
        vectorRank
        vectorSimilarity
        fusedScore
        scoreBoost
        tierBoost
        graphBoost
        boost
        finalScore
        memory {
          id
          content
          tier
          category
        }
      }
    }
  }
`);

const LIST = graphql(`
  query ($first: Int, $after: String, $last: Int, $before: String) {
    memories(first: $first, after: $after, last: $last, before: $before, orderBy: CREATED_AT_DESC) {
      edges {
        node {
          id
          content
          tier
          category
          createdAt
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
const PAGE_SIZE = 25;

const MEMORY = graphql(`
  query ($id: ID!) {
    node(id: $id) {
      __typename
      ... on Memory {
        id
        content
        tier
        category
        status
        score
        uses
        importance
        confidence
        version
        createdAt
        updatedAt
        subject {
          id
          name
          type
        }
        mentions {
          id
          name
          type
        }
        versions {
          version
          content
          reason
          createdAt
        }
        events {
          kind
          outcome
          scoreBefore
          scoreAfter
          tierBefore
          tierAfter
          createdAt
        }
      }
    }
  }
`);

export function MemoryPage() {
  const [text, setText] = useState("");
  const [query, setQuery] = useState("");
  const [{ data, error, fetching }] = useQuery({
    query: SEARCH,
    variables: { q: query },
    pause: !query,
  });
  return (
    <section aria-labelledby="memory-title">
      <h1 id="memory-title">Memory</h1>
      <details className="card">
        <summary>Remember a fact</summary>
        <RememberForm />
      </details>
      <form
        className="start"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setQuery(text.trim());
        }}
      >
        <label htmlFor="memory-query">Search memories</label>
        <input id="memory-query" value={text} onChange={(e) => setText(e.target.value)} />
        <button type="submit" disabled={!text.trim()}>
          Search
        </button>
      </form>
      {!query ? (
        <Empty>Search the tenant's memories by keywords and meaning.</Empty>
      ) : error ? (
        <ErrorBox error={error} />
      ) : fetching || !data ? (
        <Loading what="results" />
      ) : data.searchMemories.hits.length === 0 ? (
        <Empty>Nothing matches “{query}”.</Empty>
      ) : (
        <table className="list" aria-label="Search results">
          <thead>
            <tr>
              <th scope="col">Memory</th>
              <th scope="col">Keyword rank</th>
              <th scope="col">Vector rank</th>
              <th scope="col">Fused</th>
              <th scope="col">Boost</th>
              <th scope="col">Score</th>
            </tr>
          </thead>
          <tbody>
            {data.searchMemories.hits.map((h) => (
              <tr key={h.memory.id} data-testid="hit">
                <td>
                  <a href={href({ page: "memory-detail", id: h.memory.id })}>{h.memory.content}</a>
                  <div className="muted">
                    {h.memory.tier} · {h.memory.category}
                  </div>
                </td>
                <td>{h.keywordRank ?? "—"}</td>
                <td>
                  {h.vectorRank ?? "—"}
                  {h.vectorSimilarity !== null && ` (${h.vectorSimilarity.toFixed(3)})`}
                </td>
                <td>{h.fusedScore.toFixed(4)}</td>
                <td
                  title={`score ${h.scoreBoost.toFixed(2)} × tier ${h.tierBoost.toFixed(2)} × graph ${h.graphBoost.toFixed(2)}`}
                >
                  {h.boost.toFixed(2)}×
                </td>
                <td>{h.finalScore.toFixed(4)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <NewestMemories />
    </section>
  );
}

function NewestMemories() {
  const [cursor, setCursor] = useState<Cursor>(null);
  const variables = useMemo(() => pageArgs(cursor, PAGE_SIZE), [cursor]);
  const [{ data, error, fetching }] = useQuery({
    query: LIST,
    variables,
    requestPolicy: "cache-and-network",
  });
  return (
    <section aria-labelledby="memories-title">
      <h2 id="memories-title">Newest memories</h2>
      {error ? (
        <ErrorBox error={error} />
      ) : fetching && !data ? (
        <Loading what="memories" />
      ) : !data?.memories.edges.length ? (
        <Empty>No memories yet.</Empty>
      ) : (
        <table className="list" aria-label="Memories">
          <thead>
            <tr>
              <th scope="col">Memory</th>
              <th scope="col">Tier</th>
              <th scope="col">Category</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {data.memories.edges.map(({ node: m }) => (
              <tr key={m.id} data-testid="memory-row">
                <td>
                  <a href={href({ page: "memory-detail", id: m.id })}>{m.content}</a>
                </td>
                <td>{m.tier}</td>
                <td>{m.category}</td>
                <td>{when(m.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager
        label="Memory pages"
        cursor={cursor}
        pageInfo={data?.memories.pageInfo}
        fetching={fetching}
        onPage={setCursor}
      />
    </section>
  );
}

export function MemoryDetailPage({ id }: { id: string }) {
  const [{ data, error, fetching }] = useQuery({ query: MEMORY, variables: { id } });
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the memory" />;
  const m = data?.node;
  if (m?.__typename !== "Memory") return <Empty>No such memory.</Empty>;
  return (
    <article aria-labelledby="memory-detail-title">
      <h1 id="memory-detail-title">{m.content}</h1>
      <p className="facts">
        {m.tier} · {m.category} · {m.status} · score {m.score.toFixed(2)} after {m.uses} uses · importance{" "}
        {m.importance.toFixed(2)} · confidence {m.confidence.toFixed(2)} · version {m.version}
      </p>
      <p>
        About: {m.subject ? <a href={href({ page: "graph", id: m.subject.id })}>{m.subject.name}</a> : "no subject"}
        {m.mentions.length > 0 && (
          <>
            {" "}
            · mentions{" "}
            {m.mentions.map((e, i) => (
              <span key={e.id}>
                {i > 0 && ", "}
                <a href={href({ page: "graph", id: e.id })}>{e.name}</a>
              </span>
            ))}
          </>
        )}
      </p>
      <h2>Versions</h2>
      <ol className="plain">
        {m.versions.map((v) => (
          <li key={v.version}>
            v{v.version} ({when(v.createdAt)}, {v.reason}): {v.content}
          </li>
        ))}
      </ol>
      <h2>Outcomes and events</h2>
      {m.events.length === 0 ? (
        <Empty>No events.</Empty>
      ) : (
        <ol className="plain">
          {m.events.map((e, i) => (
            <li key={i}>
              {when(e.createdAt)} {e.kind}
              {e.outcome && ` ${e.outcome}`}
              {e.scoreBefore !== null &&
                e.scoreAfter !== null &&
                ` (score ${e.scoreBefore.toFixed(2)} → ${e.scoreAfter.toFixed(2)})`}
            </li>
          ))}
        </ol>
      )}
    </article>
  );
}
