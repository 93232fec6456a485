// Operations: outbound webhooks with their deliveries, inbound hooks,
// schedules with their next runs, and usage per day as a chart; new
// endpoints and schedules (`create-operations`). None of it has a
// subscription: the page polls while it is visible.

import { useMemo } from "react";
import { useQuery } from "urql";

import { Polling, usePoll } from "../poll";
import { Empty, ErrorBox, Loading, Status, when } from "../ui";
import { NewSchedule, NewWebhookEndpoint } from "./create-operations";
import { graphql, type ResultOf, type VariablesOf } from "../graphql";

const OPERATIONS = graphql(`
  {
    viewer {
      tenant {
        slug
      }
    }
    webhookEndpoints {
      name
      url
      events
      deliveries(first: 10) {
        id
        event
        status
        attempts
        lastStatusCode
        lastError
        nextAttemptAt
        deliveredAt
        createdAt
      }
    }
    connections(first: 100) {
      edges {
        node {
          id
          name
          kind
          hasSecret
          createdAt
        }
      }
    }
    schedules {
      name
      planKey
      cron
      timeZone
      paused
      nextRunAt
      upcoming(count: 3)
      lastRunAt
    }
  }
`);

const DAYS = 7;

const DAY = graphql(`
  fragment Day on TenantUsage {
    from
    tasksStarted
    tasksCompleted
    tasksFailed
    costMicros
  }
`);

/** The usage of each of the last 7 days (`d0` the oldest), each from `$f<i>` to `$t<i>`. */
const USAGE = graphql(
  `
    query Usage(
      $f0: DateTime!
      $t0: DateTime!
      $f1: DateTime!
      $t1: DateTime!
      $f2: DateTime!
      $t2: DateTime!
      $f3: DateTime!
      $t3: DateTime!
      $f4: DateTime!
      $t4: DateTime!
      $f5: DateTime!
      $t5: DateTime!
      $f6: DateTime!
      $t6: DateTime!
    ) {
      d0: usage(from: $f0, to: $t0) {
        ...Day
      }
      d1: usage(from: $f1, to: $t1) {
        ...Day
      }
      d2: usage(from: $f2, to: $t2) {
        ...Day
      }
      d3: usage(from: $f3, to: $t3) {
        ...Day
      }
      d4: usage(from: $f4, to: $t4) {
        ...Day
      }
      d5: usage(from: $f5, to: $t5) {
        ...Day
      }
      d6: usage(from: $f6, to: $t6) {
        ...Day
      }
    }
  `,
  [DAY],
);

type Usage = ResultOf<typeof DAY>;

export function OperationsPage() {
  const [{ data, error, fetching }, reload] = useQuery({ query: OPERATIONS, requestPolicy: "network-only" });
  const reread = () => reload({ requestPolicy: "network-only" });
  const polling = usePoll(reread);
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="operations" />;
  const hooks = (data?.connections.edges ?? [])
    .map((e) => e.node)
    .filter((c) => c.kind === "webhook" || c.kind === "inbound_email");
  return (
    <section aria-labelledby="operations-title">
      <div className="heading">
        <h1 id="operations-title">Operations</h1>
        <Polling on={polling} />
      </div>
      <h2>Outbound webhooks</h2>
      <details className="card">
        <summary>New webhook endpoint</summary>
        <NewWebhookEndpoint onCreated={reread} />
      </details>
      {!data?.webhookEndpoints.length ? (
        <Empty>No endpoint receives this tenant's task events.</Empty>
      ) : (
        data.webhookEndpoints.map((endpoint) => (
          <article key={endpoint.name} className="card" aria-label={`Webhook ${endpoint.name}`}>
            <h3>
              {endpoint.name} <code>{endpoint.url}</code>
            </h3>
            <p className="muted">{endpoint.events.join(", ")}</p>
            {endpoint.deliveries.length === 0 ? (
              <Empty>No deliveries yet.</Empty>
            ) : (
              <table className="list" aria-label={`Deliveries to ${endpoint.name}`}>
                <thead>
                  <tr>
                    <th scope="col">Event</th>
                    <th scope="col">Status</th>
                    <th scope="col">Attempts</th>
                    <th scope="col">Last answer</th>
                    <th scope="col">Next attempt</th>
                  </tr>
                </thead>
                <tbody>
                  {endpoint.deliveries.map((d) => (
                    <tr key={d.id} data-testid="delivery">
                      <td>{d.event}</td>
                      <td>
                        <Status status={d.status} />
                      </td>
                      <td>{d.attempts}</td>
                      <td>
                        {d.lastStatusCode ?? "—"} {d.lastError && <span className="muted">{d.lastError}</span>}
                      </td>
                      <td>{d.status === "PENDING" ? when(d.nextAttemptAt) : when(d.deliveredAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </article>
        ))
      )}
      <h2>Inbound hooks</h2>
      {hooks.length === 0 ? (
        <Empty>No inbound hook: create a connection of kind webhook or inbound_email.</Empty>
      ) : (
        <ul className="plain" aria-label="Inbound hooks">
          {hooks.map((h) => (
            <li key={h.id}>
              <code>
                /hooks/{data?.viewer.tenant?.slug ?? "<tenant>"}/{h.name}
              </code>{" "}
              ({h.kind}) {h.hasSecret ? "signed" : "no secret: refuses every delivery"}
            </li>
          ))}
        </ul>
      )}
      <h2>Schedules</h2>
      <details className="card">
        <summary>New schedule</summary>
        <NewSchedule onCreated={reread} />
      </details>
      {!data?.schedules.length ? (
        <Empty>No schedules.</Empty>
      ) : (
        <table className="list" aria-label="Schedules">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Plan</th>
              <th scope="col">Cron</th>
              <th scope="col">Next runs</th>
              <th scope="col">Last run</th>
            </tr>
          </thead>
          <tbody>
            {data.schedules.map((s) => (
              <tr key={s.name} data-testid="schedule">
                <td>{s.name}</td>
                <td>{s.planKey}</td>
                <td>
                  <code>{s.cron}</code> {s.timeZone}
                </td>
                <td>{s.paused ? "paused" : s.upcoming.map(when).join(", ")}</td>
                <td>{when(s.lastRunAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <UsageChart />
    </section>
  );
}

function UsageChart() {
  const days = useMemo(() => {
    const start = new Date();
    start.setUTCHours(0, 0, 0, 0);
    return Array.from({ length: DAYS }, (_, i) => {
      const from = new Date(start.getTime() - (DAYS - 1 - i) * 86_400_000);
      const to = new Date(from.getTime() + 86_400_000);
      return { from: from.toISOString(), to: to.toISOString() };
    });
  }, []);
  const variables = useMemo(
    () =>
      Object.fromEntries(
        days.flatMap((d, i) => [
          [`f${i}`, d.from],
          [`t${i}`, d.to],
        ]),
      ) as VariablesOf<typeof USAGE>,
    [days],
  );
  const [{ data, error, fetching }, reload] = useQuery({ query: USAGE, variables, requestPolicy: "network-only" });
  usePoll(() => reload({ requestPolicy: "network-only" }));
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="usage" />;
  const rows = days.map((_, i) => data?.[`d${i}` as keyof ResultOf<typeof USAGE>]).filter((u): u is Usage => !!u);
  const most = Math.max(1, ...rows.map((r) => r.tasksStarted));
  const width = 560;
  const bar = width / DAYS;
  return (
    <>
      <h2>Usage, last {DAYS} days</h2>
      <svg className="chart" role="img" aria-label="Tasks started per day" viewBox={`0 0 ${width} 180`} width="100%">
        {rows.map((r, i) => {
          const h = (r.tasksStarted / most) * 130;
          const failed = (r.tasksFailed / most) * 130;
          return (
            <g key={r.from} transform={`translate(${i * bar}, 0)`}>
              <rect x={8} y={150 - h} width={bar - 16} height={h} fill="#0b57d0" />
              <rect x={8} y={150 - failed} width={bar - 16} height={failed} fill="#8a1111" />
              <text x={bar / 2} y={146 - h} textAnchor="middle" fontSize="12" fill="currentColor">
                {r.tasksStarted}
              </text>
              <text x={bar / 2} y={170} textAnchor="middle" fontSize="11" fill="currentColor">
                {r.from.slice(5, 10)}
              </text>
            </g>
          );
        })}
      </svg>
      <table className="list" aria-label="Usage per day">
        <thead>
          <tr>
            <th scope="col">Day</th>
            <th scope="col">Started</th>
            <th scope="col">Completed</th>
            <th scope="col">Failed</th>
            <th scope="col">Cost</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.from} data-testid="usage-day">
              <td>{r.from.slice(0, 10)}</td>
              <td>{r.tasksStarted}</td>
              <td>{r.tasksCompleted}</td>
              <td>{r.tasksFailed}</td>
              <td>{(r.costMicros / 1e6).toFixed(4)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
