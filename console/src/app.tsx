// The console: sign in with a bearer token, then the tenant's pages. All
// data comes from the public GraphQL API, scoped by the token's tenant.

import { useMemo, useState } from "react";
import { Provider, useQuery } from "urql";

import { ClientsContext } from "./clients";
import { AccessPage } from "./pages/access";
import { ConversationsPage } from "./pages/conversations";
import { GraphPage } from "./pages/graph";
import { MemoryDetailPage, MemoryPage } from "./pages/memory";
import { ReviewsPage } from "./pages/reviews";
import { SignIn } from "./pages/sign-in";
import { TaskPage } from "./pages/task";
import { TasksPage } from "./pages/tasks";
import { type Route, section, useRoute } from "./router";
import { connect, storedToken, storeToken, type Clients } from "./session";
import { ErrorBox, Loading } from "./ui";

export function App() {
  const [token, setToken] = useState<string | null>(storedToken);
  const clients = useMemo<Clients | null>(() => (token ? connect(token) : null), [token]);
  const signOut = () => {
    clients?.ws.dispose();
    storeToken(null);
    setToken(null);
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
        <Shell onSignOut={signOut} />
      </ClientsContext.Provider>
    </Provider>
  );
}

const VIEWER = `{ viewer { subject roles tenant { name slug } } }`;

const SECTIONS: [string, string][] = [
  ["tasks", "Tasks"],
  ["reviews", "Reviews"],
  ["conversations", "Conversations"],
  ["memory", "Memory"],
  ["graph", "Graph"],
  ["access", "Access"],
];

function Shell({ onSignOut }: { onSignOut: () => void }) {
  const route = useRoute();
  const [{ data, error, fetching }] = useQuery({ query: VIEWER });
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
        <button onClick={onSignOut}>Sign out</button>
      </header>
      <main>
        <Page route={route} />
      </main>
    </div>
  );
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "task":
      return <TaskPage id={route.id} />;
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
      return <AccessPage />;
    default:
      return <TasksPage />;
  }
}
