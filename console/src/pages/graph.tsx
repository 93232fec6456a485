// The knowledge graph: the tenant's entities, newest first, 25 a page (older
// and newer by cursor), filtered by name; and around an entity, its
// neighbours drawn with Cytoscape (loaded on this page only), a click on a
// node adds that node's neighbourhood.

import { useEffect, useMemo, useRef, useState } from "react";
import { useClient, useQuery } from "urql";

import { type Cursor, Pager, pageArgs } from "../paging";
import { href } from "../router";
import { NewEntityForm, RelateForm } from "./create-knowledge";
import { Empty, ErrorBox, Loading } from "../ui";
import { graphql, type ResultOf } from "../graphql";

const ENTITIES = graphql(`
  query ($name: String, $first: Int, $after: String, $last: Int, $before: String) {
    entities(
      filter: { nameContains: $name }
      first: $first
      after: $after
      last: $last
      before: $before
      orderBy: CREATED_AT_DESC
    ) {
      edges {
        node {
          id
          name
          type
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
const AROUND = graphql(`
  query ($id: ID!) {
    neighborhood(entityId: $id, depth: 1) {
      center {
        id
        name
        type
      }
      neighbors {
        entity {
          id
          name
          type
        }
        distance
      }
      relations {
        id
        type
        fromId
        toId
        weight
      }
    }
  }
`);

type Around = ResultOf<typeof AROUND>["neighborhood"];

export function GraphPage({ id }: { id?: string }) {
  const [name, setName] = useState("");
  // Bumped by each relation added here: the neighbourhood is drawn again.
  const [relations, setRelations] = useState(0);
  const [cursor, setCursor] = useState<Cursor>(null);
  // A new name starts from the newest page.
  useEffect(() => setCursor(null), [name]);
  const variables = useMemo(() => ({ name: name || null, ...pageArgs(cursor, PAGE_SIZE) }), [name, cursor]);
  const [{ data, error, fetching }, reload] = useQuery({
    query: ENTITIES,
    variables,
  });
  return (
    <section aria-labelledby="graph-title" className="split">
      <div>
        <h1 id="graph-title">Knowledge graph</h1>
        <details className="card">
          <summary>New entity</summary>
          <NewEntityForm
            onCreated={(created) => {
              // The new entity is the newest.
              if (cursor) setCursor(null);
              else reload({ requestPolicy: "network-only" });
              location.hash = href({ page: "graph", id: created });
            }}
          />
        </details>
        <label htmlFor="entity-filter">Entities named</label>
        <input id="entity-filter" value={name} onChange={(e) => setName(e.target.value)} />
        {error ? (
          <ErrorBox error={error} />
        ) : fetching && !data ? (
          <Loading what="entities" />
        ) : !data?.entities.edges.length ? (
          <Empty>No entities.</Empty>
        ) : (
          <ul className="plain" aria-label="Entities">
            {data.entities.edges.map(({ node }) => (
              <li key={node.id}>
                <a href={href({ page: "graph", id: node.id })} aria-current={node.id === id ? "page" : undefined}>
                  {node.name}
                </a>{" "}
                <span className="muted">{node.type}</span>
              </li>
            ))}
          </ul>
        )}
        <Pager
          label="Entity pages"
          cursor={cursor}
          pageInfo={data?.entities.pageInfo}
          fetching={fetching}
          onPage={setCursor}
        />
      </div>
      {id ? (
        <div>
          <Neighbourhood key={`${id}:${relations}`} id={id} />
          <RelateForm fromId={id} onRelated={() => setRelations((n) => n + 1)} />
        </div>
      ) : (
        <Empty>Pick an entity to see its neighbourhood.</Empty>
      )}
    </section>
  );
}

function Neighbourhood({ id }: { id: string }) {
  const client = useClient();
  const box = useRef<HTMLDivElement>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [shown, setShown] = useState<{ nodes: number; edges: number; expanded: string[] }>({
    nodes: 0,
    edges: 0,
    expanded: [],
  });

  useEffect(() => {
    let disposed = false;
    let graph: import("cytoscape").Core | null = null;
    const expanded = new Set<string>();
    const load = async (entity: string) => {
      const result = await client.query(AROUND, { id: entity }).toPromise();
      if (result.error) throw new Error(result.error.message);
      return result.data!.neighborhood;
    };
    const add = (around: Around) => {
      if (!graph) return;
      for (const n of [around.center, ...around.neighbors.map((x) => x.entity)]) {
        if (graph.getElementById(n.id).empty()) {
          graph.add({ group: "nodes", data: { id: n.id, label: `${n.name}\n${n.type}` } });
        }
      }
      for (const r of around.relations) {
        if (
          graph.getElementById(r.id).empty() &&
          !graph.getElementById(r.fromId).empty() &&
          !graph.getElementById(r.toId).empty()
        ) {
          graph.add({ group: "edges", data: { id: r.id, source: r.fromId, target: r.toId, label: r.type } });
        }
      }
      graph
        .layout({
          name: "breadthfirst",
          roots: [id],
          spacingFactor: 1.2,
          padding: 40,
          animate: false,
        } as import("cytoscape").LayoutOptions)
        .run();
      setShown({ nodes: graph.nodes().length, edges: graph.edges().length, expanded: [...expanded] });
    };
    (async () => {
      try {
        const [{ default: cytoscape }, first] = await Promise.all([import("cytoscape"), load(id)]);
        if (disposed || !box.current) return;
        graph = cytoscape({
          container: box.current,
          minZoom: 0.3,
          maxZoom: 1.4,
          style: [
            {
              selector: "node",
              style: {
                label: "data(label)",
                "text-wrap": "wrap",
                "font-size": 10,
                width: 22,
                height: 22,
                "background-color": "#0b57d0",
                // The theme's colours (the canvas does not read the page's CSS).
                color: themeColour("--fg"),
                "text-valign": "bottom",
                "text-margin-y": 4,
              },
            },
            { selector: "node:selected", style: { "background-color": "#8a1111" } },
            {
              selector: "edge",
              style: {
                label: "data(label)",
                "font-size": 9,
                width: 1.5,
                "curve-style": "bezier",
                "target-arrow-shape": "triangle",
                "text-background-color": themeColour("--surface"),
                color: themeColour("--fg"),
                "line-color": themeColour("--border"),
                "target-arrow-color": themeColour("--border"),
                "text-background-opacity": 1,
                "text-rotation": "autorotate",
              },
            },
          ],
        });
        expanded.add(id);
        add(first);
        graph.on("tap", "node", async (event) => {
          const entity = event.target.id() as string;
          if (expanded.has(entity)) return;
          expanded.add(entity);
          try {
            add(await load(entity));
          } catch (e) {
            setError(String(e));
          }
        });
        (window as unknown as { __graph?: unknown }).__graph = graph;
      } catch (e) {
        setError(String(e));
      } finally {
        setLoading(false);
      }
    })();
    return () => {
      disposed = true;
      graph?.destroy();
    };
  }, [client, id]);

  return (
    <div className="graph-view">
      {error && <ErrorBox error={error} />}
      {loading && <Loading what="the neighbourhood" />}
      <p className="facts" data-testid="graph-counts" aria-live="polite">
        {shown.nodes} entities, {shown.edges} relations shown; click an entity to expand it.
      </p>
      <div ref={box} className="graph" role="img" aria-label="Neighbourhood graph" />
    </div>
  );
}

/** A colour the stylesheet names (`styles.css`'s `:root`), as the theme
 * sets it now: resolved on an element (the name holds `light-dark(…)`). */
function themeColour(name: string): string {
  const probe = document.createElement("span");
  probe.style.color = `var(${name})`;
  document.body.append(probe);
  const colour = getComputedStyle(probe).color;
  probe.remove();
  return colour || "#1b1f24";
}
