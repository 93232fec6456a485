// A task's run as a waterfall: one bar per step attempt, placed by when it
// started and as long as it took, against the run's whole span. Attempts
// are numbered per step in the order they ran, across retries of the task
// (the server's `attempt` restarts with each retry of the task, since a
// step's retry policy counts within one run).

export interface TimedStep {
  stepId: string;
  status: string;
  startedAt: string;
  finishedAt: string;
  durationMs: number;
}

/** Each step record with its attempt number across the task's runs. */
export function numbered<T extends { stepId: string }>(steps: T[]): (T & { ordinal: number })[] {
  const seen: Record<string, number> = {};
  return steps.map((s) => {
    seen[s.stepId] = (seen[s.stepId] ?? 0) + 1;
    return { ...s, ordinal: seen[s.stepId] };
  });
}

export function Waterfall({ steps }: { steps: TimedStep[] }) {
  if (steps.length === 0) return null;
  const start = Math.min(...steps.map((s) => Date.parse(s.startedAt)));
  const end = Math.max(...steps.map((s) => Date.parse(s.finishedAt)));
  const span = Math.max(end - start, 1);
  return (
    <section aria-labelledby="waterfall-title">
      <h2 id="waterfall-title">Waterfall</h2>
      <p className="muted">
        {steps.length} step attempts over {span} ms
      </p>
      <ol className="waterfall" aria-label="Waterfall">
        {numbered(steps).map((s, i) => {
          const left = ((Date.parse(s.startedAt) - start) / span) * 100;
          const width = Math.max((s.durationMs / span) * 100, 0.5);
          return (
            <li key={i} data-testid="waterfall-row">
              <span className="label">
                {s.stepId} · attempt {s.ordinal}
              </span>
              <span className="track">
                <span
                  className={`bar status-${s.status.toLowerCase()}`}
                  style={{ left: `${Math.min(left, 99.5)}%`, width: `${Math.min(width, 100 - Math.min(left, 99.5))}%` }}
                  title={`${s.durationMs} ms, ${s.status}`}
                />
              </span>
              <span className="muted">{s.durationMs} ms</span>
            </li>
          );
        })}
      </ol>
    </section>
  );
}
