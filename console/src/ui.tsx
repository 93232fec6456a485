// Shared pieces of every page: loading, error and empty states, and the
// JSON view (redacted values, which the server sends as "[REDACTED]",
// are shown as such).

import type { CombinedError } from "urql";

export function Loading({ what }: { what: string }) {
  return (
    <p className="state" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function ErrorBox({ error }: { error: CombinedError | Error | string }) {
  const message = typeof error === "string" ? error : error.message.replace(/^\[GraphQL\] /, "");
  return (
    <p className="state error" role="alert">
      {message}
    </p>
  );
}

export function Empty({ children }: { children: React.ReactNode }) {
  return <p className="state empty">{children}</p>;
}

export function Json({ value }: { value: unknown }) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  return (
    <pre className="json">
      {text.split(/("\[REDACTED\]")/).map((part, i) =>
        part === '"[REDACTED]"' ? (
          <span key={i} className="redacted" title="redacted by the server">
            [redacted]
          </span>
        ) : (
          part
        ),
      )}
    </pre>
  );
}

export function Status({ status }: { status: string }) {
  return <span className={`status status-${status.toLowerCase()}`}>{status}</span>;
}

export function when(iso: string | null | undefined): string {
  return iso ? new Date(iso).toLocaleString() : "—";
}

/** The time of day, to the millisecond (events follow each other fast). */
export function clock(iso: string): string {
  const at = new Date(iso);
  return `${at.toLocaleTimeString()}.${String(at.getMilliseconds()).padStart(3, "0")}`;
}
