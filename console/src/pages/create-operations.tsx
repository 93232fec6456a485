// Creating what Operations lists: an outbound webhook endpoint (its
// signing secret shown this once) and a schedule (a plan run on a cron in
// a time zone). Errors come back inline; `onCreated` re-reads the page.

import { useState } from "react";
import { useMutation } from "urql";

import { ErrorBox } from "../ui";
import { graphql, type VariablesOf } from "../graphql";

const CREATE_ENDPOINT = graphql(`
  mutation ($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) {
      endpoint {
        name
      }
      secret
    }
  }
`);
const CREATE_SCHEDULE = graphql(`
  mutation ($input: CreateScheduleInput!) {
    createSchedule(input: $input) {
      schedule {
        name
        nextRunAt
      }
    }
  }
`);

const EVENTS: WebhookEvent[] = ["TASK_COMPLETED", "TASK_FAILED", "TASK_NEEDS_REVIEW", "TASK_CANCELLED"];

type WebhookEvent = VariablesOf<typeof CREATE_ENDPOINT>["input"]["events"][number];

export function NewWebhookEndpoint({ onCreated }: { onCreated: () => void }) {
  const [name, setName] = useState("");
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState<WebhookEvent[]>(["TASK_COMPLETED"]);
  const [secret, setSecret] = useState<string | null>(null);
  const [result, create] = useMutation(CREATE_ENDPOINT);
  return (
    <form
      aria-label="New webhook endpoint"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await create({ input: { name: name.trim(), url: url.trim(), events } });
        if (answer.data) {
          setSecret(answer.data.createWebhookEndpoint.secret);
          setName("");
          onCreated();
        }
      }}
    >
      <label htmlFor="endpoint-name">Name</label>
      <input id="endpoint-name" value={name} onChange={(e) => setName(e.target.value)} />
      <label htmlFor="endpoint-url">URL</label>
      <input id="endpoint-url" type="url" value={url} onChange={(e) => setUrl(e.target.value)} />
      <fieldset>
        <legend>Events</legend>
        {EVENTS.map((event) => (
          <label key={event}>
            <input
              type="checkbox"
              checked={events.includes(event)}
              onChange={(e) =>
                setEvents((now) => (e.target.checked ? [...now, event] : now.filter((x) => x !== event)))
              }
            />{" "}
            {event}{" "}
          </label>
        ))}
      </fieldset>
      <button type="submit" disabled={!name.trim() || !url.trim() || events.length === 0 || result.fetching}>
        Create endpoint
      </button>
      {result.error && <ErrorBox error={result.error} />}
      {secret && (
        <p className="state secret" role="status" data-testid="endpoint-secret">
          The signing secret, shown this once: <code>{secret}</code>
        </p>
      )}
    </form>
  );
}

export function NewSchedule({ onCreated }: { onCreated: () => void }) {
  const [name, setName] = useState("");
  const [planKey, setPlanKey] = useState("");
  const [cron, setCron] = useState("0 9 * * 1-5");
  const [timeZone, setTimeZone] = useState(Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  const [input, setInput] = useState("");
  const [result, create] = useMutation(CREATE_SCHEDULE);
  return (
    <form
      aria-label="New schedule"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        const answer = await create({
          input: { name: name.trim(), planKey: planKey.trim(), cron: cron.trim(), timeZone: timeZone.trim(), input },
        });
        if (answer.data) {
          setName("");
          onCreated();
        }
      }}
    >
      <label htmlFor="schedule-name">Name</label>
      <input id="schedule-name" value={name} onChange={(e) => setName(e.target.value)} />
      <label htmlFor="schedule-plan">Plan key</label>
      <input id="schedule-plan" value={planKey} onChange={(e) => setPlanKey(e.target.value)} />
      <label htmlFor="schedule-cron">Cron (minute hour day month weekday)</label>
      <input id="schedule-cron" value={cron} onChange={(e) => setCron(e.target.value)} />
      <label htmlFor="schedule-zone">Time zone</label>
      <input id="schedule-zone" value={timeZone} onChange={(e) => setTimeZone(e.target.value)} />
      <label htmlFor="schedule-input">Input of each run (optional)</label>
      <input id="schedule-input" value={input} onChange={(e) => setInput(e.target.value)} />
      <button type="submit" disabled={!name.trim() || !planKey.trim() || !cron.trim() || result.fetching}>
        Create schedule
      </button>
      {result.error && <ErrorBox error={result.error} />}
    </form>
  );
}
