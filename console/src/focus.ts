// Focus after navigation: a hash route changes the page without a load, so
// a screen reader hears nothing and the keyboard stays where it was. The
// new page's heading takes the focus instead, once it is drawn (a page
// that loads its data first draws it later).

import { type RefObject, useEffect, useRef } from "react";

/** Focuses the first `h1` under `root`; whether there was one. */
export function focusHeading(root: HTMLElement): boolean {
  const heading = root.querySelector("h1");
  if (!heading) return false;
  heading.tabIndex = -1;
  heading.focus();
  return true;
}

/** Moves the focus to the page's heading whenever `page` changes (not on
 * the first page: a load puts the focus at the top already). */
export function useFocusOnNavigation(page: string, main: RefObject<HTMLElement | null>): void {
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    const root = main.current;
    if (!root || focusHeading(root)) return;
    const observer = new MutationObserver(() => {
      if (focusHeading(root)) observer.disconnect();
    });
    observer.observe(root, { childList: true, subtree: true });
    const timer = setTimeout(() => observer.disconnect(), 5000);
    return () => {
      observer.disconnect();
      clearTimeout(timer);
    };
  }, [page, main]);
}
