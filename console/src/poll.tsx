// A short poll for the pages whose data has no subscription (plans,
// operations, capabilities): read again every few seconds while the page
// is visible, not at all while it is hidden (another tab, a minimised
// window), and at once when it shows again.

import { useEffect, useRef, useState } from "react";

/** How often a visible page reads its data again. */
export const POLL_MS = 5000;

function shown(): boolean {
  return document.visibilityState === "visible";
}

/** Calls `reread` every `ms` while the page is visible (and `wanted`);
 * returns whether it is polling now. */
export function usePoll(reread: () => void, ms = POLL_MS, wanted = true): boolean {
  const [visible, setVisible] = useState(shown);
  const latest = useRef(reread);
  latest.current = reread;
  useEffect(() => {
    const changed = () => {
      setVisible(shown());
      if (shown()) latest.current();
    };
    document.addEventListener("visibilitychange", changed);
    return () => document.removeEventListener("visibilitychange", changed);
  }, []);
  useEffect(() => {
    if (!visible || !wanted) return;
    const timer = setInterval(() => latest.current(), ms);
    return () => clearInterval(timer);
  }, [visible, ms, wanted]);
  return visible && wanted;
}

/** Says whether a polled page is kept up to date now. */
export function Polling({ on }: { on: boolean }) {
  return (
    <span className={on ? "live on" : "live off"} data-testid="polling">
      {on ? "live" : "paused while hidden"}
    </span>
  );
}
