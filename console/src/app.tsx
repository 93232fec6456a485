// The console: sign in with a bearer token, then the tenant's pages. All
// data comes from the public GraphQL API, scoped by the token's tenant.

import { useMemo, useState } from "react";
import { Provider, useQuery } from "urql";

import { SignIn } from "./pages/sign-in";
import { TaskPage } from "./pages/task";
import { TasksPage } from "./pages/tasks";
import { ReviewsPage } from "./pages/reviews";
import { href, useRoute } from "./router";
import { connect, storedToken, storeToken, type Clients } from "./session";
import { ErrorBox, Loading } from "./ui";
import { ClientsContext } from "./clients";

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
          <a href={href({ page: "tasks" })} aria-current={route.page !== "reviews" ? "page" : undefined}>
            Tasks
          </a>
          <a href={href({ page: "reviews" })} aria-current={route.page === "reviews" ? "page" : undefined}>
            Reviews
          </a>
        </nav>
        <span className="who" data-testid="viewer">
          {viewer?.tenant ? viewer.tenant.name : "platform"} · {viewer?.subject}
        </span>
        <button onClick={onSignOut}>Sign out</button>
      </header>
      <main>
        {route.page === "task" ? (
          <TaskPage id={route.id} />
        ) : route.page === "reviews" ? (
          <ReviewsPage />
        ) : (
          <TasksPage />
        )}
      </main>
    </div>
  );
}
