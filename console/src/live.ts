// A task's events, live and resumable: subscribes to `taskEvents` after the
// last stored sequence number seen and, when the stream drops, subscribes
// again from there, so no stored event is lost or shown twice. Token
// deltas are merged by offset, so a delta seen twice adds nothing; the
// tokens they carry are counted as they arrive (the stored usage counts
// them only when their step settles).

import type { Client as WsClient } from "graphql-ws";
import { stringifyDocument } from "urql";

import { graphql, type ResultOf, type VariablesOf } from "./graphql";

const EVENTS = graphql(`
  subscription TaskEvents($id: ID!, $after: Int) {
    taskEvents(taskId: $id, after: $after) {
      __typename
      seq
      kind
      stepId
      tool
      status
      summary
      error
      createdAt
      ... on TokenDelta {
        offset
        text
      }
    }
  }
`);

/** One event of a task's stream, as the schema types it. */
export type TaskEvent = ResultOf<typeof EVENTS>["taskEvents"];

export interface Timeline {
  /** Stored events, in order, each once. */
  events: TaskEvent[];
  /** Streamed text per step. */
  text: Record<string, string>;
  /** Output tokens streamed so far, over every step (an estimate: see `tokensIn`). */
  streamed: number;
  /** Whether the stream is connected now. */
  live: boolean;
  ended: boolean;
}

export function emptyTimeline(): Timeline {
  return { events: [], text: {}, streamed: 0, live: false, ended: false };
}

/** The tokens in a piece of streamed text. Providers stream about one
 * token a delta; a long delta (the text so far, sent to a stream joined
 * mid-step) counts as one token per four characters. */
export function tokensIn(added: string): number {
  return added.length > 16 ? Math.round(added.length / 4) : 1;
}

/** `sofar` with a token delta at `offset` merged in, or `null` when the
 * delta adds nothing (seen before) or leaves a gap. */
export function mergeDelta(sofar: string, offset: number, text: string): string | null {
  if (offset > sofar.length) return null;
  const merged = sofar.slice(0, offset) + text;
  return merged.length > sofar.length ? merged : null;
}

/** Fold one event into the timeline (pure: returns a new one). */
export function fold(timeline: Timeline, event: TaskEvent): Timeline {
  if (event.__typename === "TokenDelta" && event.stepId && event.text !== undefined) {
    const sofar = timeline.text[event.stepId] ?? "";
    const merged = mergeDelta(sofar, event.offset ?? 0, event.text);
    if (merged === null) return timeline;
    return {
      ...timeline,
      text: { ...timeline.text, [event.stepId]: merged },
      streamed: timeline.streamed + tokensIn(merged.slice(sofar.length)),
    };
  }
  const last = timeline.events.length ? timeline.events[timeline.events.length - 1].seq : 0;
  if (event.seq <= last) return timeline;
  return { ...timeline, events: [...timeline.events, event] };
}

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);

/** Follow a task's events after `after` until it ends or `stop` is
 * called. */
export function follow(
  ws: WsClient,
  taskId: string,
  onChange: (update: (t: Timeline) => Timeline) => void,
  after = 0,
): () => void {
  let lastSeq = after;
  let stopped = false;
  let unsubscribe: (() => void) | null = null;

  const start = () => {
    if (stopped) return;
    onChange((t) => ({ ...t, live: true, ended: false }));
    const variables: VariablesOf<typeof EVENTS> = { id: taskId, after: lastSeq };
    unsubscribe = ws.subscribe<ResultOf<typeof EVENTS>>(
      { query: stringifyDocument(EVENTS), variables },
      {
        next(result) {
          const event = result.data?.taskEvents;
          if (!event) return;
          if (event.__typename !== "TokenDelta") lastSeq = Math.max(lastSeq, event.seq);
          onChange((t) => fold(t, event));
          if (event.kind === "STATUS_CHANGED" && event.status && TERMINAL.has(event.status)) {
            onChange((t) => ({ ...t, ended: true }));
          }
        },
        error() {
          onChange((t) => ({ ...t, live: false }));
          // Resubscribe from the last event seen.
          setTimeout(start, 500);
        },
        complete() {
          onChange((t) => ({ ...t, live: false }));
        },
      },
    );
  };
  start();
  return () => {
    stopped = true;
    unsubscribe?.();
  };
}
