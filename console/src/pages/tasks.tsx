// The tenant's tasks, the 50 newest: a list kept live by `taskUpdates`,
// filtered by status, and a form that starts a task.

import { useEffect, useMemo, useState } from "react";
import { useMutation, useQuery, useSubscription } from "urql";

import { href } from "../router";
import { Empty, ErrorBox, Loading, Status, when } from "../ui";

const STATUSES = [
  "PENDING",
  "EXECUTING",
  "NEEDS_REVIEW",
  "AWAITING_APPROVAL",
  "COMPLETED",
  "FAILED",
  "CANCELLED",
];

const TASK_FIELDS = "id status intent channel input createdAt updatedAt plan { key version }";

const TASKS = `query($filter: TaskFilter) { tasks(first: 50, filter: $filter, orderBy: CREATED_AT_DESC) { edges { node { ${TASK_FIELDS} } } } }`;
const UPDATES = `subscription { taskUpdates { ${TASK_FIELDS} } }`;
const START = `mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }`;

interface Row {
  id: string;
  status: string;
  intent: string | null;
  channel: string;
  input: string;
  createdAt: string;
  updatedAt: string;
  plan: { key: string; version: number } | null;
}

export function TasksPage() {
  const [status, setStatus] = useState("");
  const filter = useMemo(() => (status ? { statuses: [status] } : null), [status]);
  const [{ data, error, fetching }] = useQuery<{ tasks: { edges: { node: Row }[] } }>({
    query: TASKS,
    variables: { filter },
  });
  const [live] = useSubscription<{ taskUpdates: Row }>({ query: UPDATES });
  const [rows, setRows] = useState<Row[]>([]);
  useEffect(() => {
    if (data) setRows(data.tasks.edges.map((e) => e.node));
  }, [data]);
  useEffect(() => {
    const task = live.data?.taskUpdates;
    if (!task) return;
    setRows((current) => {
      const others = current.filter((r) => r.id !== task.id);
      if (status && task.status !== status) return others;
      return [task, ...others].sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    });
  }, [live.data, status]);

  return (
    <section aria-labelledby="tasks-title">
      <h1 id="tasks-title">Tasks</h1>
      <StartTask />
      <div className="toolbar">
        <label htmlFor="status-filter">Status</label>
        <select id="status-filter" value={status} onChange={(e) => setStatus(e.target.value)}>
          <option value="">any</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        <span className={live.error ? "live off" : "live on"}>
          {live.error ? "updates paused" : "live"}
        </span>
      </div>
      {error ? (
        <ErrorBox error={error} />
      ) : fetching && !data ? (
        <Loading what="tasks" />
      ) : rows.length === 0 ? (
        <Empty>No tasks yet: start one above.</Empty>
      ) : (
        <table className="list" aria-label="Tasks">
          <thead>
            <tr>
              <th scope="col">Task</th>
              <th scope="col">Status</th>
              <th scope="col">Plan</th>
              <th scope="col">Channel</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((t) => (
              <tr key={t.id} data-testid="task-row">
                <td>
                  <a href={href({ page: "task", id: t.id })}>{t.input || t.intent || t.id}</a>
                </td>
                <td>
                  <Status status={t.status} />
                </td>
                <td>{t.plan ? `${t.plan.key} v${t.plan.version}` : "—"}</td>
                <td>{t.channel}</td>
                <td>{when(t.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function StartTask() {
  const [planKey, setPlanKey] = useState("");
  const [input, setInput] = useState("");
  const [result, start] = useMutation<{ startTask: { task: { id: string } } }>(START);
  return (
    <form
      className="start"
      aria-label="Start a task"
      onSubmit={async (e) => {
        e.preventDefault();
        const variables = {
          input: { input, ...(planKey.trim() ? { planKey: planKey.trim() } : {}) },
        };
        const answer = await start(variables);
        const id = answer.data?.startTask.task.id;
        if (id) location.hash = href({ page: "task", id });
      }}
    >
      <label htmlFor="plan-key">Plan key</label>
      <input
        id="plan-key"
        value={planKey}
        onChange={(e) => setPlanKey(e.target.value)}
        placeholder="intent detection when empty"
      />
      <label htmlFor="task-input">Input</label>
      <input id="task-input" value={input} onChange={(e) => setInput(e.target.value)} />
      <button type="submit" disabled={result.fetching}>
        Start task
      </button>
      {result.error && <ErrorBox error={result.error} />}
    </form>
  );
}
