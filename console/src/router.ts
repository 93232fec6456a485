// Hash routes (`#/tasks`, `#/tasks/<id>`): the server serves one page.

import { useEffect, useState } from "react";

export type Route =
  | { page: "tasks" }
  | { page: "task"; id: string }
  | { page: "reviews" };

export function parse(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (parts[0] === "tasks" && parts[1]) return { page: "task", id: decodeURIComponent(parts[1]) };
  if (parts[0] === "reviews") return { page: "reviews" };
  return { page: "tasks" };
}

export function href(route: Route): string {
  switch (route.page) {
    case "task":
      return `#/tasks/${encodeURIComponent(route.id)}`;
    case "reviews":
      return "#/reviews";
    default:
      return "#/tasks";
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
