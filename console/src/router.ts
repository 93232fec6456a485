// Hash routes (`#/tasks`, `#/tasks/<id>`, …): the server serves one page.
// The task list's filters ride in the hash's query (`#/tasks?status=FAILED&plan=refund&q=order`),
// so a filtered list survives a reload and can be shared.

import { useEffect, useState } from "react";

/** The task list's filters, as the URL keeps them (empty: not filtered). */
export interface TaskListFilter {
  status: string;
  plan: string;
  q: string;
}

export type Route =
  | ({ page: "tasks" } & TaskListFilter)
  | { page: "task"; id: string }
  | { page: "reviews" }
  | { page: "conversations" }
  | { page: "conversation"; id: string }
  | { page: "memory" }
  | { page: "memory-detail"; id: string }
  | { page: "graph"; id?: string }
  | { page: "access" }
  | { page: "plans" }
  | { page: "capabilities" }
  | { page: "operations" };

export function parse(hash: string): Route {
  const [path, query = ""] = hash.replace(/^#\/?/, "").split("?", 2);
  const [first, second] = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  const tasks: Route = {
    page: "tasks",
    status: params.get("status") ?? "",
    plan: params.get("plan") ?? "",
    q: params.get("q") ?? "",
  };
  const id = second ? decodeURIComponent(second) : undefined;
  switch (first) {
    case "tasks":
      return id ? { page: "task", id } : tasks;
    case "reviews":
      return { page: "reviews" };
    case "conversations":
      return id ? { page: "conversation", id } : { page: "conversations" };
    case "memory":
      return id ? { page: "memory-detail", id } : { page: "memory" };
    case "graph":
      return { page: "graph", id };
    case "access":
      return { page: "access" };
    case "plans":
      return { page: "plans" };
    case "capabilities":
      return { page: "capabilities" };
    case "operations":
      return { page: "operations" };
    default:
      return tasks;
  }
}

export function href(route: Route): string {
  const with_id = (base: string, id?: string) => (id ? `#/${base}/${encodeURIComponent(id)}` : `#/${base}`);
  switch (route.page) {
    case "task":
      return with_id("tasks", route.id);
    case "conversation":
      return with_id("conversations", route.id);
    case "memory-detail":
      return with_id("memory", route.id);
    case "graph":
      return with_id("graph", route.id);
    case "tasks": {
      const params = new URLSearchParams();
      for (const key of ["status", "plan", "q"] as const) if (route[key]) params.set(key, route[key]);
      const query = params.toString();
      return query ? `#/tasks?${query}` : "#/tasks";
    }
    default:
      return `#/${route.page}`;
  }
}

/** The section a route belongs to, for the navigation. */
export function section(route: Route): string {
  switch (route.page) {
    case "task":
      return "tasks";
    case "conversation":
      return "conversations";
    case "memory-detail":
      return "memory";
    default:
      return route.page;
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.hash));
  useEffect(() => {
    const changed = () => setRoute(parse(location.hash));
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return route;
}
