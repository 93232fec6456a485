// Forks and reruns on a task's page: where the task came from (a fork or a
// rerun of another, and from which step), its own forks and reruns,
// "Run again" for a finished task, and the steps of its plan with their
// checkpoints: the state a settled step left, read on demand (`stateAt`),
// and "Fork from here", a form whose state and input edits (JSON merge
// patches) are checked in the browser before `forkTask` runs; the new
// task's page then opens.
//
// A fork from step S copies the steps before S (they do not run again)
// and runs S onwards, so the server takes one only once every step before
// S has settled, and not while a worker drives the task: those are the
// steps that offer it.

import { useState } from "react";
import { useMutation, useQuery } from "urql";

import { href } from "../router";
import { ErrorBox, Json, Loading, Status, when } from "../ui";
import { graphql, type ResultOf } from "../graphql";

/** What this part reads of a task (spread in the task page's query). */
export const LINEAGE = graphql(`
  fragment Lineage on Task {
    id
    status
    settledStepIds
    frozenPlan {
      id
      tool
    }
    checkpoints {
      stepId
      stateDigest
      sourceTaskId
    }
    forkedFrom {
      task {
        id
        input
        intent
      }
      stepId
      rerun
    }
    forks {
      id
      input
      status
      createdAt
      forkedFrom {
        stepId
        rerun
      }
    }
  }
`);

type Lineage = ResultOf<typeof LINEAGE>;

/** A worker drives the task now: the server forks it once it pauses. */
const DRIVEN = ["DETECTING_INTENT", "PLANNING", "EXECUTING"];

const FORK = graphql(`
  mutation ($input: ForkTaskInput!) {
    forkTask(input: $input) {
      task {
        id
      }
    }
  }
`);
const RERUN = graphql(`
  mutation ($taskId: ID!) {
    rerunTask(input: { taskId: $taskId }) {
      task {
        id
      }
    }
  }
`);
const STATE_AT = graphql(`
  query ($id: ID!, $stepId: String!) {
    task(id: $id) {
      id
      stateAt(stepId: $stepId)
    }
  }
`);

const open = (id: string) => {
  location.hash = href({ page: "task", id });
};

/** "Forked from … at …" (or "Rerun of … from …"), a link to the original. */
export function ForkedFrom({ task }: { task: Lineage }) {
  const from = task.forkedFrom;
  if (!from) return null;
  return (
    <p className="facts" data-testid="forked-from">
      {from.rerun ? "Rerun of " : "Forked from "}
      {from.task ? (
        <a href={href({ page: "task", id: from.task.id })}>{from.task.input || from.task.intent || from.task.id}</a>
      ) : (
        "a task that is gone"
      )}{" "}
      {from.rerun ? "from" : "at"} step <code>{from.stepId}</code>
    </p>
  );
}

/** Runs a finished task again as a new task (`rerunTask`) and opens it. */
export function RunAgain({ task }: { task: Lineage }) {
  const [rerun, start] = useMutation(RERUN);
  const finished = ["COMPLETED", "FAILED", "CANCELLED"].includes(task.status);
  return (
    <>
      <button
        onClick={async () => {
          if (!confirm("Run this task again as a new task, from its failed step (or its first)?")) return;
          const answer = await start({ taskId: task.id });
          const id = answer.data?.rerunTask.task.id;
          if (id) open(id);
        }}
        disabled={!finished || rerun.fetching}
      >
        Run again
      </button>
      {rerun.error && <ErrorBox error={rerun.error} />}
    </>
  );
}

/** The task's forks and reruns, oldest first. */
export function Forks({ task }: { task: Lineage }) {
  if (task.forks.length === 0) return null;
  return (
    <section aria-labelledby="forks-title">
      <h2 id="forks-title">Forks and reruns</h2>
      <ul className="plain" aria-label="Forks">
        {task.forks.map((f) => (
          <li key={f.id}>
            <a href={href({ page: "task", id: f.id })}>{f.input || f.id}</a>{" "}
            <span className="muted">
              {f.forkedFrom?.rerun ? "rerun from" : "fork from"} <code>{f.forkedFrom?.stepId}</code> ·{" "}
              {when(f.createdAt)}
            </span>{" "}
            <Status status={f.status} />
          </li>
        ))}
      </ul>
    </section>
  );
}

/** The plan's steps, each with its checkpoint and what can start there. */
export function ForkPoints({ task }: { task: Lineage }) {
  const [forking, setForking] = useState<string | null>(null);
  const [showing, setShowing] = useState<Record<string, boolean>>({});
  if (task.frozenPlan.length === 0) return null;
  const settled = new Set(task.settledStepIds);
  // A settled step has one checkpoint (it never runs again).
  const checkpoint = (stepId: string) => task.checkpoints.find((c) => c.stepId === stepId);
  const running = DRIVEN.includes(task.status);
  return (
    <section aria-labelledby="checkpoints-title">
      <h2 id="checkpoints-title">Checkpoints</h2>
      <p className="hint">
        The state each settled step left. A fork from a step copies the steps before it (they do not run again) and
        runs it and the rest from there{running && "; forks can start once the task pauses, waits or finishes"}.
      </p>
      <ol className="plain checkpoints" aria-label="Checkpoints">
        {task.frozenPlan.map((step, i) => {
          const point = checkpoint(step.id);
          const forkable = !running && task.frozenPlan.slice(0, i).every((s) => settled.has(s.id));
          return (
            <li key={step.id} data-testid="fork-point" data-step={step.id}>
              <span>
                <code>{step.id}</code> {step.tool}{" "}
                {point ? (
                  <span className="muted">
                    settled · state <code title={point.stateDigest}>{point.stateDigest.slice(0, 8)}</code>
                    {point.sourceTaskId !== task.id && " · copied from the original"}
                  </span>
                ) : (
                  <span className="muted">{settled.has(step.id) ? "settled" : "not settled"}</span>
                )}
              </span>
              <span className="actions">
                {settled.has(step.id) && (
                  <button
                    aria-expanded={Boolean(showing[step.id])}
                    onClick={() => setShowing((s) => ({ ...s, [step.id]: !s[step.id] }))}
                  >
                    State after
                  </button>
                )}
                {forkable && (
                  <button aria-expanded={forking === step.id} onClick={() => setForking(forking === step.id ? null : step.id)}>
                    Fork from here
                  </button>
                )}
              </span>
              {showing[step.id] && <StateAfter taskId={task.id} stepId={step.id} />}
              {forking === step.id && (
                <ForkForm
                  taskId={task.id}
                  stepId={step.id}
                  previous={task.frozenPlan[i - 1]?.id}
                  onClose={() => setForking(null)}
                />
              )}
            </li>
          );
        })}
      </ol>
    </section>
  );
}

function StateAfter({ taskId, stepId }: { taskId: string; stepId: string }) {
  const [{ data, error, fetching }] = useQuery({
    query: STATE_AT,
    variables: { id: taskId, stepId },
    requestPolicy: "network-only",
  });
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what={`the state after ${stepId}`} />;
  return (
    <section aria-label={`State after ${stepId}`} data-testid="state-after">
      <Json value={data?.task?.stateAt ?? null} />
    </section>
  );
}

/** A merge patch typed in a field: empty is none, else it must be a JSON
 * object (the server refuses anything else; said here before it is sent). */
export function mergePatch(label: string, text: string): { patch?: Record<string, unknown>; problem?: string } {
  if (!text.trim()) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { problem: `${label} are not valid JSON: ${(e as Error).message}` };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { problem: `${label} must be a JSON object (a merge patch), like {"key": "new value"}.` };
  }
  return { patch: value as Record<string, unknown> };
}

function ForkForm({
  taskId,
  stepId,
  previous,
  onClose,
}: {
  taskId: string;
  stepId: string;
  previous: string | undefined;
  onClose: () => void;
}) {
  const [stateText, setStateText] = useState("");
  const [inputText, setInputText] = useState("");
  const [problem, setProblem] = useState<string | null>(null);
  const [forked, fork] = useMutation(FORK);
  const field = (name: string) => `fork-${name}-${stepId}`;
  return (
    <form
      className="fork"
      aria-label={`Fork from ${stepId}`}
      onSubmit={async (e) => {
        e.preventDefault();
        const state = mergePatch("State edits", stateText);
        const input = mergePatch("Input edits", inputText);
        const invalid = state.problem ?? input.problem;
        setProblem(invalid ?? null);
        if (invalid) return;
        const answer = await fork({
          input: { taskId, fromStepId: stepId, stateEdits: state.patch, inputEdits: input.patch },
        });
        const id = answer.data?.forkTask.task.id;
        if (id) open(id);
      }}
    >
      <p className="hint">
        A new task: the steps before <code>{stepId}</code> are copied, and it runs on from{" "}
        {previous ? (
          <>
            the state <code>{previous}</code> left
          </>
        ) : (
          "an empty state"
        )}
        , with these edits merged in (<code>null</code> removes a key).
      </p>
      <label htmlFor={field("state")}>State edits (JSON merge patch, optional)</label>
      <textarea id={field("state")} rows={3} value={stateText} onChange={(e) => setStateText(e.target.value)} />
      <label htmlFor={field("input")}>Input edits (JSON merge patch of text and payload, optional)</label>
      <textarea id={field("input")} rows={2} value={inputText} onChange={(e) => setInputText(e.target.value)} />
      <div className="actions">
        <button type="submit" disabled={forked.fetching}>
          Fork
        </button>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
      {problem && <ErrorBox error={problem} />}
      {forked.error && <ErrorBox error={forked.error} />}
    </form>
  );
}
