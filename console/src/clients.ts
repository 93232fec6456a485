import { createContext, useContext } from "react";

import type { Clients } from "./session";

export const ClientsContext = createContext<Clients | null>(null);

/** The session's clients (inside the signed-in shell). */
export function useClients(): Clients {
  const clients = useContext(ClientsContext);
  if (!clients) throw new Error("no session");
  return clients;
}
