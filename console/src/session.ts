// The signed-in session: the bearer token (kept in sessionStorage, so it
// leaves with the tab) and the GraphQL clients built on it. Every request
// and the WebSocket carry the token; the server scopes all data to its
// tenant.

import { createClient as createWsClient, type Client as WsClient } from "graphql-ws";
import { Client, cacheExchange, fetchExchange, subscriptionExchange } from "urql";

const TOKEN_KEY = "brainstem.token";
const ACTING_KEY = "brainstem.acting";

export function storedToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** The tenant a platform admin acts in (slug), if one was picked. */
export function storedActing(): string | null {
  return sessionStorage.getItem(ACTING_KEY);
}

export function storeActing(slug: string | null): void {
  if (slug) sessionStorage.setItem(ACTING_KEY, slug);
  else sessionStorage.removeItem(ACTING_KEY);
}

function wsUrl(): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/graphql/ws`;
}

/** The clients of one session: urql for queries, mutations and list
 * subscriptions; the graphql-ws client for resumable event streams. */
export interface Clients {
  urql: Client;
  ws: WsClient;
}

/** Clients for `token`; a platform admin's requests act in `acting`
 * (sent as `X-Acting-Tenant`, which the server audits). */
export function connect(token: string, acting: string | null = null): Clients {
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (acting) headers["X-Acting-Tenant"] = acting;
  const ws = createWsClient({
    url: wsUrl(),
    connectionParams: headers,
    lazy: true,
    retryAttempts: Infinity,
    shouldRetry: () => true,
    retryWait: async (retries) => {
      await new Promise((resolve) => setTimeout(resolve, Math.min(250 * 2 ** retries, 5000)));
    },
  });
  const urql = new Client({
    url: "/graphql",
    exchanges: [
      cacheExchange,
      fetchExchange,
      subscriptionExchange({
        forwardSubscription(request) {
          const input = { ...request, query: request.query || "" };
          return {
            subscribe(sink) {
              const unsubscribe = ws.subscribe(input, sink);
              return { unsubscribe };
            },
          };
        },
      }),
    ],
    fetchOptions: () => ({ headers }),
    requestPolicy: "cache-and-network",
  });
  return { urql, ws };
}
