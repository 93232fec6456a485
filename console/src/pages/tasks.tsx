// The tenant's tasks, newest first, 50 a page: older and newer pages by
// cursor, filters by status, plan, input text, channel and creation days
// kept in the URL, the first page kept live by `taskUpdates`, and a form
// that starts a task.

import { useEffect, useMemo, useState } from "react";
import { useMutation, useQuery, useSubscription } from "urql";

import { type Cursor, isNewest, Pager, pageArgs } from "../paging";
import { DayFilter, FilterText } from "../filters";
import { dayRange, href, type TaskListFilter } from "../router";
import { graphql, type ResultOf, type VariablesOf } from "../graphql";
import { Empty, ErrorBox, Loading, Status, when } from "../ui";

const STATUSES = ["PENDING", "EXECUTING", "NEEDS_REVIEW", "AWAITING_APPROVAL", "COMPLETED", "FAILED", "CANCELLED"];
const CHANNELS = ["WEB", "API", "WEBHOOK", "EMAIL", "SYSTEM"];

const ROW = graphql(`
  fragment TaskRow on Task {
    id
    status
    intent
    channel
    input
    createdAt
    updatedAt
    plan {
      key
      version
    }
  }
`);

const PAGE_SIZE = 50;

const TASKS = graphql(
  `
    query Tasks($filter: TaskFilter, $first: Int, $after: String, $last: Int, $before: String) {
      tasks(first: $first, after: $after, last: $last, before: $before, filter: $filter, orderBy: CREATED_AT_DESC) {
        edges {
          node {
            ...TaskRow
          }
        }
        pageInfo {
          hasNextPage
          hasPreviousPage
          startCursor
          endCursor
        }
      }
    }
  `,
  [ROW],
);
const UPDATES = graphql(
  `
    subscription TaskUpdates {
      taskUpdates {
        ...TaskRow
      }
    }
  `,
  [ROW],
);
const START = graphql(`
  mutation ($input: StartTaskInput!) {
    startTask(input: $input) {
      task {
        id
      }
    }
  }
`);

type Row = ResultOf<typeof ROW>;
type TaskFilter = NonNullable<VariablesOf<typeof TASKS>["filter"]>;
type TaskStatus = NonNullable<TaskFilter["statuses"]>[number];
type Channel = NonNullable<TaskFilter["channel"]>;

/** Whether a task passes the list's filters (as the server's `TaskFilter` decides). */
function passes(task: Row, filter: TaskListFilter): boolean {
  if (filter.status && task.status !== filter.status) return false;
  if (filter.plan && task.plan?.key !== filter.plan) return false;
  if (filter.channel && task.channel !== filter.channel) return false;
  const { after, before } = dayRange(filter.from, filter.to);
  const created = Date.parse(task.createdAt);
  if ((after && created < Date.parse(after)) || (before && created >= Date.parse(before))) return false;
  return !filter.q || task.input.toLowerCase().includes(filter.q.toLowerCase());
}

/** Whether any filter is set. */
function filtered(filter: TaskListFilter): boolean {
  return Boolean(filter.status || filter.plan || filter.q || filter.channel || filter.from || filter.to);
}

export function TasksPage({ filter }: { filter: TaskListFilter }) {
  const [cursor, setCursor] = useState<Cursor>(null);
  // A new filter starts from the newest page.
  useEffect(() => setCursor(null), [filter.status, filter.plan, filter.q, filter.channel, filter.from, filter.to]);
  const variables = useMemo(() => {
    const { after, before } = dayRange(filter.from, filter.to);
    const taskFilter = {
      // The URL's values go as they are: the server refuses one it does not know.
      ...(filter.status ? { statuses: [filter.status as TaskStatus] } : {}),
      ...(filter.plan ? { planKey: filter.plan } : {}),
      ...(filter.q ? { inputContains: filter.q } : {}),
      ...(filter.channel ? { channel: filter.channel as Channel } : {}),
      ...(after ? { createdAfter: after } : {}),
      ...(before ? { createdBefore: before } : {}),
    };
    const page = pageArgs(cursor, PAGE_SIZE);
    return {
      filter: Object.keys(taskFilter).length ? taskFilter : null,
      ...page,
    };
  }, [filter.status, filter.plan, filter.q, filter.channel, filter.from, filter.to, cursor]);
  const [{ data, error, fetching }] = useQuery({
    query: TASKS,
    variables,
  });
  const [live] = useSubscription({ query: UPDATES });
  const [rows, setRows] = useState<Row[]>([]);
  useEffect(() => {
    if (data) setRows(data.tasks.edges.map((e) => e.node));
  }, [data]);
  const newest = isNewest(cursor, data?.tasks.pageInfo);
  useEffect(() => {
    const task = live.data?.taskUpdates;
    if (!task) return;
    setRows((current) => {
      const known = current.some((r) => r.id === task.id);
      // A page further down changes its rows in place; only the newest
      // page takes new tasks in.
      if (!known && !newest) return current;
      const others = current.filter((r) => r.id !== task.id);
      if (!passes(task, filter)) return others;
      return [task, ...others].sort((a, b) => b.createdAt.localeCompare(a.createdAt)).slice(0, PAGE_SIZE);
    });
  }, [live.data, filter, newest]);
  const setFilter = (change: Partial<TaskListFilter>) => {
    location.hash = href({ page: "tasks", ...filter, ...change });
  };

  return (
    <section aria-labelledby="tasks-title">
      <h1 id="tasks-title">Tasks</h1>
      <StartTask />
      <div className="toolbar">
        <label htmlFor="status-filter">Status</label>
        <select id="status-filter" value={filter.status} onChange={(e) => setFilter({ status: e.target.value })}>
          <option value="">any</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        <FilterText id="plan-filter" label="Plan" value={filter.plan} onCommit={(plan) => setFilter({ plan })} />
        <FilterText id="text-filter" label="Input contains" value={filter.q} onCommit={(q) => setFilter({ q })} />
        <label htmlFor="channel-filter">Channel</label>
        <select id="channel-filter" value={filter.channel} onChange={(e) => setFilter({ channel: e.target.value })}>
          <option value="">any</option>
          {CHANNELS.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </select>
        <DayFilter id="from-filter" label="Created from" value={filter.from} onChange={(from) => setFilter({ from })} />
        <DayFilter id="to-filter" label="to" value={filter.to} onChange={(to) => setFilter({ to })} />
        <span className={live.error ? "live off" : "live on"}>{live.error ? "updates paused" : "live"}</span>
      </div>
      {error ? (
        <ErrorBox error={error} />
      ) : fetching && !data ? (
        <Loading what="tasks" />
      ) : rows.length === 0 ? (
        <Empty>{filtered(filter) ? "No task matches these filters." : "No tasks yet: start one above."}</Empty>
      ) : (
        <>
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
          <Pager label="Pages" cursor={cursor} pageInfo={data?.tasks.pageInfo} fetching={fetching} onPage={setCursor} />
        </>
      )}
    </section>
  );
}

function StartTask() {
  const [planKey, setPlanKey] = useState("");
  const [input, setInput] = useState("");
  const [result, start] = useMutation(START);
  return (
    <form
      className="start"
      aria-label="Start a task"
      onSubmit={async (e) => {
        e.preventDefault();
        const variables = {
          input: {
            input,
            ...(planKey.trim() ? { planKey: planKey.trim() } : {}),
          },
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
