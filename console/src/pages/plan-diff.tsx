// Two versions of a plan side by side: each version's definition as
// JSON, the lines only one side has marked (removed on the left, added on
// the right), from a longest-common-subsequence of lines. By default the
// newest version against the one before it.

import { useState } from "react";

/** One line of a side: its text, and whether the other side lacks it. */
interface Line {
  text: string;
  changed: boolean;
}

/** Plans are short; past this many lines a side is shown unmarked. */
const MAX_LINES = 2000;

/** Mark the lines of `a` and `b` that are not in their longest common subsequence. */
export function diffLines(a: string[], b: string[]): { left: Line[]; right: Line[] } {
  if (a.length > MAX_LINES || b.length > MAX_LINES) {
    return {
      left: a.map((text) => ({ text, changed: false })),
      right: b.map((text) => ({ text, changed: false })),
    };
  }
  // common[i][j]: the longest common subsequence of a[i..] and b[j..].
  const common = Array.from({ length: a.length + 1 }, () => new Array<number>(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const left: Line[] = [];
  const right: Line[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      left.push({ text: a[i++], changed: false });
      right.push({ text: b[j++], changed: false });
    } else if (j < b.length && (i >= a.length || common[i][j + 1] >= common[i + 1][j])) {
      right.push({ text: b[j++], changed: true });
    } else {
      left.push({ text: a[i++], changed: true });
    }
  }
  return { left, right };
}

export interface Version {
  version: number;
  definition: string;
}

/** Compare two of `versions` (newest first, as the API lists them). */
export function PlanDiff({ versions }: { versions: Version[] }) {
  const [older, setOlder] = useState(versions[1]?.version ?? versions[0]?.version);
  const [newer, setNewer] = useState(versions[0]?.version);
  if (versions.length < 2) return null;
  const find = (v: number | undefined) => versions.find((x) => x.version === v) ?? versions[0];
  const { left, right } = diffLines(find(older).definition.split("\n"), find(newer).definition.split("\n"));
  const changes = left.filter((l) => l.changed).length + right.filter((l) => l.changed).length;
  const picker = (id: string, label: string, value: number | undefined, set: (v: number) => void) => (
    <span>
      <label htmlFor={id}>{label}</label>{" "}
      <select id={id} value={value} onChange={(e) => set(Number(e.target.value))}>
        {versions.map((v) => (
          <option key={v.version} value={v.version}>
            v{v.version}
          </option>
        ))}
      </select>
    </span>
  );
  return (
    <section aria-labelledby="plan-diff-title">
      <h3 id="plan-diff-title">Compare versions</h3>
      <p className="filters">
        {picker("plan-diff-older", "From", older, setOlder)} {picker("plan-diff-newer", "to", newer, setNewer)}{" "}
        <span className="muted" role="status">
          {changes === 0 ? "no lines differ" : `${changes} line${changes === 1 ? "" : "s"} differ`}
        </span>
      </p>
      <div className="columns diff">
        <pre aria-label={`Version ${find(older).version}`}>
          {left.map((l, i) => (l.changed ? <del key={i}>{l.text + "\n"}</del> : <span key={i}>{l.text + "\n"}</span>))}
        </pre>
        <pre aria-label={`Version ${find(newer).version}`}>
          {right.map((l, i) => (l.changed ? <ins key={i}>{l.text + "\n"}</ins> : <span key={i}>{l.text + "\n"}</span>))}
        </pre>
      </div>
    </section>
  );
}
