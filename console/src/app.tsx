// The console: sign in with a bearer token, then the tenant's pages. All
// data comes from the public GraphQL API, scoped by the token's tenant.

import { useMemo, useRef, useState } from "react";
import { Provider, useQuery } from "urql";

import { ClientsContext } from "./clients";
import { focusHeading, useFocusOnNavigation } from "./focus";
import { NewTenant } from "./new-tenant";
import { AccessPage } from "./pages/access";
import { CapabilitiesPage } from "./pages/capabilities";
import { OperationsPage } from "./pages/operations";
import { PlansPage } from "./pages/plans";
import { ConversationsPage } from "./pages/conversations";
import { GraphPage } from "./pages/graph";
import { MemoryDetailPage, MemoryPage } from "./pages/memory";
import { ReviewsPage } from "./pages/reviews";
import { SignIn } from "./pages/sign-in";
import { TaskPage } from "./pages/task";
import { TasksPage } from "./pages/tasks";
import { type Route, section, useRoute } from "./router";
import { connect, storeActing, storedActing, storedToken, storeToken, type Clients } from "./session";
import { applyTheme, storedTheme, type Theme } from "./theme";
import { ErrorBox, Loading } from "./ui";
import { graphql } from "./graphql";

export function App() {
  const [token, setToken] = useState<string | null>(storedToken);
  const [acting, setActing] = useState<string | null>(storedActing);
  const clients = useMemo<Clients | null>(() => (token ? connect(token, acting) : null), [token, acting]);
  const signOut = () => {
    clients?.ws.dispose();
    storeToken(null);
    storeActing(null);
    setActing(null);
    setToken(null);
  };
  const actIn = (slug: string | null) => {
    clients?.ws.dispose();
    storeActing(slug);
    setActing(slug);
  };
  if (!clients) {
    return (
      <SignIn
        onToken={(t) => {
          storeToken(t);
          setToken(t);
        }}
      />
    );
  }
  return (
    <Provider value={clients.urql}>
      <ClientsContext.Provider value={clients}>
        <Shell key={acting ?? ""} acting={acting} onActIn={actIn} onSignOut={signOut} />
      </ClientsContext.Provider>
    </Provider>
  );
}

const VIEWER = graphql(`
  {
    viewer {
      subject
      roles
      tenant {
        name
        slug
      }
    }
  }
`);
const TENANTS = graphql(`
  {
    tenants(first: 100) {
      edges {
        node {
          slug
          name
        }
      }
    }
  }
`);

const SECTIONS: [string, string][] = [
  ["tasks", "Tasks"],
  ["reviews", "Reviews"],
  ["conversations", "Conversations"],
  ["memory", "Memory"],
  ["graph", "Graph"],
  ["plans", "Plans"],
  ["capabilities", "Capabilities"],
  ["operations", "Operations"],
  ["access", "Access"],
];

interface ShellProps {
  acting: string | null;
  onActIn: (slug: string | null) => void;
  onSignOut: () => void;
}

/** What makes one page another, for moving the focus (a list's filters do not). */
function pageKey(route: Route): string {
  return "id" in route ? `${route.page}/${route.id ?? ""}` : route.page;
}

function Shell({ acting, onActIn, onSignOut }: ShellProps) {
  const route = useRoute();
  const main = useRef<HTMLElement>(null);
  useFocusOnNavigation(pageKey(route), main);
  const [theme, setTheme] = useState<Theme>(storedTheme);
  const [{ data, error, fetching }] = useQuery({ query: VIEWER });
  const platformAdmin = acting !== null || (data?.viewer?.roles ?? []).includes("PLATFORM_ADMIN");
  const [tenants, reloadTenants] = useQuery({
    query: TENANTS,
    pause: !platformAdmin,
  });
  if (fetching && !data) return <Loading what="your session" />;
  if (error) {
    return (
      <main className="signin">
        <ErrorBox error={error} />
        <button onClick={onSignOut}>Sign in again</button>
      </main>
    );
  }
  const viewer = data?.viewer;
  return (
    <div className="shell">
      <a
        className="skip"
        href="#main"
        onClick={(e) => {
          // The hash names routes: focus the page's heading instead of following it.
          e.preventDefault();
          if (main.current) focusHeading(main.current);
        }}
      >
        Skip to content
      </a>
      <header className="top">
        <strong>Brainstem</strong>
        <nav aria-label="Main">
          {SECTIONS.map(([page, label]) => (
            <a key={page} href={`#/${page}`} aria-current={section(route) === page ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span className="who" data-testid="viewer">
          {viewer?.tenant ? viewer.tenant.name : "platform"} · {viewer?.subject}
        </span>
        {platformAdmin && (
          <span className={acting ? "acting on" : "acting"}>
            <label htmlFor="acting-tenant">Acting in</label>{" "}
            <select id="acting-tenant" value={acting ?? ""} onChange={(e) => onActIn(e.target.value || null)}>
              <option value="">no tenant</option>
              {(tenants.data?.tenants.edges ?? []).map(({ node }) => (
                <option key={node.slug} value={node.slug}>
                  {node.name} ({node.slug})
                </option>
              ))}
              {acting && !(tenants.data?.tenants.edges ?? []).some((e) => e.node.slug === acting) && (
                <option value={acting}>{acting}</option>
              )}
            </select>
          </span>
        )}
        <span className="theme">
          <label htmlFor="theme">Theme</label>{" "}
          <select
            id="theme"
            value={theme}
            onChange={(e) => {
              const picked = e.target.value as Theme;
              applyTheme(picked);
              setTheme(picked);
            }}
          >
            <option value="system">as the system</option>
            <option value="light">light</option>
            <option value="dark">dark</option>
          </select>
        </span>
        {/* Same tab: GraphiQL reads this tab's session for its headers. */}
        <a href="graphiql.html" title="GraphiQL, signed in as this session">
          GraphiQL
        </a>
        <button onClick={onSignOut}>Sign out</button>
      </header>
      <main ref={main} id="main">
        {platformAdmin && !acting && !viewer?.tenant ? (
          <section aria-labelledby="pick-title" className="card">
            <h1 id="pick-title">Pick a tenant</h1>
            <p>
              A platform credential belongs to no tenant: choose the tenant to act in from <em>Acting in</em> above
              (each request then names it, and that tenant's audit log records it), or make a new one.
            </p>
            <NewTenant
              onCreated={(slug) => {
                reloadTenants({ requestPolicy: "network-only" });
                onActIn(slug);
              }}
            />
          </section>
        ) : (
          <Page route={route} />
        )}
      </main>
    </div>
  );
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "task":
      // A new task (a fork, say) is a new page: nothing of the last one's
      // timeline carries over.
      return <TaskPage key={route.id} id={route.id} />;
    case "reviews":
      return <ReviewsPage />;
    case "conversations":
      return <ConversationsPage />;
    case "conversation":
      return <ConversationsPage id={route.id} />;
    case "memory":
      return <MemoryPage />;
    case "memory-detail":
      return <MemoryDetailPage id={route.id} />;
    case "graph":
      return <GraphPage id={route.id} />;
    case "access":
      return <AccessPage filter={route} />;
    case "plans":
      return <PlansPage />;
    case "capabilities":
      return <CapabilitiesPage />;
    case "operations":
      return <OperationsPage />;
    case "tasks":
      return <TasksPage filter={route} />;
  }
}
