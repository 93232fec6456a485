// One task: its state and steps (read once, then again when its status
// changes) and a live timeline of its events, tokens streaming into the
// step that produces them; cancel and retry, each after a confirmation.
// Forks and reruns (`task-fork.tsx`): where the task was forked from, its
// forks, "Run again", and its checkpoints with "Fork from here".
// Its token counter rises as text streams: the stored usage, plus the
// tokens streamed since the task was last read.

import { useEffect, useReducer, useRef, useState } from "react";
import { useMutation, useQuery } from "urql";

import { useClients } from "../clients";
import { emptyTimeline, follow, type Timeline } from "../live";
import { ForkedFrom, ForkPoints, Forks, LINEAGE, RunAgain } from "./task-fork";
import { numbered, Waterfall } from "./waterfall";
import { clock, Empty, ErrorBox, Json, Loading, Status, when } from "../ui";
import { graphql } from "../graphql";

const TASK = graphql(
  `
    query ($id: ID!) {
      task(id: $id) {
        id
        status
        input
        intent
        channel
        error
        traceId
        createdAt
        startedAt
        completedAt
        plan {
          key
          version
        }
        usage {
          inputTokens
          outputTokens
          costMicros
        }
        result {
          content
          model
        }
        pendingReview {
          id
          stepId
          reason
          proposed
        }
        steps {
          stepId
          tool
          attempt
          status
          args
          output
          summary
          error
          startedAt
          finishedAt
          durationMs
        }
        ...Lineage
      }
    }
  `,
  [LINEAGE],
);

const CANCEL = graphql(`
  mutation ($id: ID!) {
    cancelTask(input: { id: $id }) {
      task {
        id
        status
      }
    }
  }
`);
const RETRY = graphql(`
  mutation ($id: ID!) {
    retryTask(input: { id: $id }) {
      task {
        id
        status
      }
    }
  }
`);

export function TaskPage({ id }: { id: string }) {
  const { ws } = useClients();
  const [{ data, error, fetching }, reload] = useQuery({
    query: TASK,
    variables: { id },
    requestPolicy: "network-only",
  });
  const [timeline, update] = useReducer(
    (t: Timeline, change: (t: Timeline) => Timeline) => change(t),
    undefined,
    emptyTimeline,
  );
  // Followed again after a retry (the stream ends with the task).
  const [run, setRun] = useState(0);
  const lastSeq = useRef(0);
  lastSeq.current = timeline.events.length ? timeline.events[timeline.events.length - 1].seq : 0;
  useEffect(() => follow(ws, id, update, lastSeq.current), [ws, id, run]);
  // Read the task again whenever its status or steps move on.
  const seen = useRef(0);
  // Tokens streamed when the task was last asked for, and when the answer
  // shown was asked for: the stored usage counts those.
  const streamedAtRead = useRef(0);
  const [counted, setCounted] = useState(0);
  useEffect(() => {
    const last = timeline.events[timeline.events.length - 1];
    if (!last || last.seq === seen.current) return;
    if (["STATUS_CHANGED", "STEP_COMPLETED", "STEP_FAILED"].includes(last.kind)) {
      seen.current = last.seq;
      streamedAtRead.current = timeline.streamed;
      reload({ requestPolicy: "network-only" });
    }
  }, [timeline.events, timeline.streamed, reload]);
  useEffect(() => {
    if (data) setCounted(streamedAtRead.current);
  }, [data]);
  const [cancelled, cancel] = useMutation(CANCEL);
  const [retried, retry] = useMutation(RETRY);

  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the task" />;
  const task = data?.task;
  if (!task) return <Empty>No such task.</Empty>;
  const settled = ["COMPLETED", "FAILED", "CANCELLED"].includes(task.status);
  const streaming = Math.max(0, timeline.streamed - counted);
  // A step's streamed text shows under its first event.
  const firstOfStep: Record<string, number> = {};
  for (const e of timeline.events) {
    if (e.stepId && !(e.stepId in firstOfStep)) firstOfStep[e.stepId] = e.seq;
  }
  return (
    <article aria-labelledby="task-title">
      <h1 id="task-title">{task.input || task.intent || "Task"}</h1>
      <p className="facts">
        <Status status={task.status} /> · {task.plan ? `${task.plan.key} v${task.plan.version}` : "no plan yet"} ·{" "}
        {task.channel} · started {when(task.startedAt)} · trace <code>{task.traceId}</code>
      </p>
      <ForkedFrom task={task} />
      <p className="facts" data-testid="usage" aria-live="off">
        {task.usage.inputTokens} input and {task.usage.outputTokens + streaming} output tokens
        {streaming > 0 && ` (${streaming} streaming now, estimated)`} · cost {(task.usage.costMicros / 1e6).toFixed(6)}
        {streaming > 0 && " so far"}
      </p>
      {task.error && <ErrorBox error={task.error} />}
      <div className="actions">
        <button
          onClick={() => {
            if (confirm("Cancel this task? The step in hand finishes; no further step runs.")) cancel({ id: task.id });
          }}
          disabled={settled || cancelled.fetching}
        >
          Cancel
        </button>
        <button
          onClick={async () => {
            if (!confirm("Retry this task from the step that failed?")) return;
            const answer = await retry({ id: task.id });
            if (!answer.error) {
              setRun((n) => n + 1);
              reload({ requestPolicy: "network-only" });
            }
          }}
          disabled={task.status !== "FAILED" || retried.fetching}
        >
          Retry
        </button>
        <RunAgain task={task} />
        {(cancelled.error || retried.error) && <ErrorBox error={(cancelled.error || retried.error)!} />}
      </div>
      {task.result && (
        <section aria-label="Result">
          <h2>Answer</h2>
          <p className="answer">{task.result.content}</p>
          <p className="muted">Answered by {task.result.model}</p>
        </section>
      )}
      <Waterfall steps={task.steps} />
      <ForkPoints task={task} />
      <Forks task={task} />
      <div className="columns">
        <section aria-labelledby="timeline-title">
          <h2 id="timeline-title">
            Timeline{" "}
            <span className={timeline.live ? "live on" : "live off"}>
              {timeline.live ? "live" : timeline.ended ? "ended" : "reconnecting"}
            </span>
          </h2>
          {timeline.events.length === 0 ? (
            <Empty>No events yet.</Empty>
          ) : (
            <ol className="timeline" aria-label="Events">
              {timeline.events.map((e) => (
                <li key={e.seq} data-testid="event" data-seq={e.seq}>
                  <span className="seq">#{e.seq}</span>{" "}
                  <time className="muted" dateTime={e.createdAt}>
                    {clock(e.createdAt)}
                  </time>{" "}
                  <span className="kind">{e.kind}</span>
                  {e.stepId && <span className="step"> {e.stepId}</span>}
                  {e.status && <Status status={e.status} />} <span>{e.summary}</span>
                  {e.error && <span className="error"> {e.error}</span>}
                  {e.stepId && firstOfStep[e.stepId] === e.seq && timeline.text[e.stepId] && (
                    <p className="stream" data-testid="stream">
                      {timeline.text[e.stepId]}
                    </p>
                  )}
                </li>
              ))}
            </ol>
          )}
        </section>
        <section aria-labelledby="steps-title">
          <h2 id="steps-title">Steps</h2>
          {task.steps.length === 0 ? (
            <Empty>No step has run yet.</Empty>
          ) : (
            numbered(task.steps).map((s, i) => (
              <details key={i} className="step">
                <summary>
                  {s.stepId} <code>{s.tool}</code> attempt {s.ordinal} <Status status={s.status} /> {s.durationMs} ms
                </summary>
                <h3>Input</h3>
                <Json value={s.args} />
                <h3>Output</h3>
                <Json value={withoutMessages(s.output)} />
                {promptOf(s.output) && (
                  <section aria-label={`Prompt of ${s.stepId}`} data-testid="prompt">
                    <h3>Assembled prompt (as the model got it, redacted)</h3>
                    <ol className="plain prompt">
                      {promptOf(s.output)!.map((m, i) => (
                        <li key={i}>
                          <strong>{m.role}</strong> <span className="message">{m.content}</span>
                        </li>
                      ))}
                    </ol>
                  </section>
                )}
                {s.error && <ErrorBox error={s.error} />}
              </details>
            ))
          )}
        </section>
      </div>
    </article>
  );
}

interface PromptMessage {
  role: string;
  content: string;
}

/** An agent step's output carries the messages of its last model call. */
function promptOf(output: unknown): PromptMessage[] | null {
  const messages = (output as { messages?: unknown } | null)?.messages;
  if (!Array.isArray(messages)) return null;
  return messages.map((m) => {
    const message = m as { role?: unknown; content?: unknown };
    return {
      role: String(message.role ?? "?"),
      content: typeof message.content === "string" ? message.content : JSON.stringify(message.content),
    };
  });
}

function withoutMessages(output: unknown): unknown {
  if (output && typeof output === "object" && "messages" in output) {
    const { messages: _messages, ...rest } = output as Record<string, unknown>;
    return rest;
  }
  return output;
}
