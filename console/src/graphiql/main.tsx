// GraphiQL, served by the binary at /console/graphiql.html (a browser's
// `GET /graphql` is redirected here): every script, style and font comes
// from this build, so the page runs under the console's content security
// policy. Its own entry of the Vite build, so the console's first load
// carries none of it.
//
// Credentials go in the Headers tab (`{"Authorization": "Bearer <token>"}`);
// they are sent on HTTP requests and as the WebSocket's `connection_init`
// payload, and are not kept in local storage. Opened from the console, in
// the same tab, the headers start with that tab's session (its token, and
// the tenant a platform admin acts in).

import "graphiql/setup-workers/vite";
import "graphiql/style.css";
import "./graphiql.css";

import { createGraphiQLFetcher } from "@graphiql/toolkit";
import { GraphiQL } from "graphiql";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";

import { storedActing, storedToken } from "../session";

const wsScheme = window.location.protocol === "https:" ? "wss:" : "ws:";
const fetcher = createGraphiQLFetcher({
  url: "/graphql",
  subscriptionUrl: `${wsScheme}//${window.location.host}/graphql/ws`,
});

const DEFAULT_QUERY = `# Brainstem's GraphQL API. Most operations need a credential:
# open Headers below and paste
# {"Authorization": "Bearer <token or API key>"}

{
  __typename
}
`;

/** The console session's headers, as GraphiQL's header editor takes them. */
function sessionHeaders(): string | undefined {
  const token = storedToken();
  if (!token) return undefined;
  const acting = storedActing();
  return JSON.stringify(
    { Authorization: `Bearer ${token}`, ...(acting ? { "X-Acting-Tenant": acting } : {}) },
    null,
    2,
  );
}
const headers = sessionHeaders();

const root = document.getElementById("graphiql");
if (root) {
  createRoot(root).render(
    <StrictMode>
      <GraphiQL
        fetcher={fetcher}
        defaultQuery={DEFAULT_QUERY}
        initialHeaders={headers}
        defaultHeaders={headers}
        shouldPersistHeaders={false}
      />
    </StrictMode>,
  );
}
