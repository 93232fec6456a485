// Hash routes (`#/tasks`, `#/tasks/<id>`, …): the server serves one page.
// The task list's filters ride in the hash's query
// (`#/tasks?status=FAILED&plan=refund&q=order&channel=API&from=2026-01-01&to=2026-01-31`),
// and the audit log's likewise (`#/access?action=api_key.&actor=user:ada`),
// so a filtered list survives a reload and can be shared. Dates are days
// (`from` and `to` both included), in the browser's time zone.

import { useEffect, useState } from "react";

/** The task list's filters, as the URL keeps them (empty: not filtered). */
export interface TaskListFilter {
  status: string;
  plan: string;
  q: string;
  channel: string;
  from: string;
  to: string;
}

const TASK_FILTERS = ["status", "plan", "q", "channel", "from", "to"] as const;

/** The audit log's filters, as the URL keeps them (empty: not filtered). */
export interface AuditFilter {
  /** Actions starting with this. */
  action: string;
  actor: string;
  from: string;
  to: string;
}

const AUDIT_FILTERS = ["action", "actor", "from", "to"] as const;

/** The instants a day range covers, for a connection's filter: from the
 * start of `from` to the start of the day after `to` (absent: open). */
export function dayRange(from: string, to: string): { after?: string; before?: string } {
  const start = (day: string) => new Date(`${day}T00:00:00`);
  const range: { after?: string; before?: string } = {};
  if (from && !Number.isNaN(start(from).getTime())) range.after = start(from).toISOString();
  if (to && !Number.isNaN(start(to).getTime())) {
    const next = start(to);
    next.setDate(next.getDate() + 1);
    range.before = next.toISOString();
  }
  return range;
}

function withQuery(path: string, values: Record<string, string>, keys: readonly string[]): string {
  const params = new URLSearchParams();
  for (const key of keys) if (values[key]) params.set(key, values[key]);
  const query = params.toString();
  return query ? `${path}?${query}` : path;
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
  | ({ page: "access" } & AuditFilter)
  | { page: "plans" }
  | { page: "capabilities" }
  | { page: "operations" };

export function parse(hash: string): Route {
  const [path, query = ""] = hash.replace(/^#\/?/, "").split("?", 2);
  const [first, second] = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  const read = <K extends string>(keys: readonly K[]) =>
    Object.fromEntries(keys.map((k) => [k, params.get(k) ?? ""])) as Record<K, string>;
  const tasks: Route = { page: "tasks", ...read(TASK_FILTERS) };
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
      return { page: "access", ...read(AUDIT_FILTERS) };
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
    case "tasks":
      return withQuery("#/tasks", { ...route }, TASK_FILTERS);
    case "access":
      return withQuery("#/access", { ...route }, AUDIT_FILTERS);
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
