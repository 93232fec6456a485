// The plan editor's help with steps: a picker of the tools steps can use
// (`tools`, each with its input schema) that appends a step, its required
// arguments filled with empty values; and each step's arguments checked
// against its tool's schema while they are typed, the problems shown in
// place. The server still checks the plan when it is published.

import { useMemo, useState } from "react";
import { useQuery } from "urql";

import { graphql, type ResultOf } from "../graphql";
import { skeleton, violations } from "../json-schema";

const TOOLS = graphql(`
  query PlanTools {
    tools {
      key
      description
      inputSchema
    }
  }
`);

export type ToolInfo = ResultOf<typeof TOOLS>["tools"][number];

/** The tools steps can use (none until they are read). */
export function useTools(): ToolInfo[] {
  const [{ data }] = useQuery({ query: TOOLS });
  return data?.tools ?? [];
}

interface Step {
  id?: unknown;
  tool?: unknown;
  args?: unknown;
}

/** `steps` with a step of `tool` appended, its id unique among them. */
export function withStep(steps: Step[], tool: ToolInfo): Step[] {
  const base = tool.key.replace(/[^a-z0-9_]+/gi, "_");
  const taken = new Set(steps.map((s) => s.id));
  let id = base;
  for (let n = 2; taken.has(id); n++) id = `${base}_${n}`;
  return [...steps, { id, tool: tool.key, args: skeleton(tool.inputSchema) }];
}

export function ToolPicker(props: { id: string; tools: ToolInfo[]; onAdd: (tool: ToolInfo) => void }) {
  const [key, setKey] = useState("");
  const tool = props.tools.find((t) => t.key === key);
  return (
    <div className="toolbar">
      <label htmlFor={props.id}>Tool</label>
      <select id={props.id} value={key} onChange={(e) => setKey(e.target.value)}>
        <option value="">pick a tool…</option>
        {props.tools.map((t) => (
          <option key={t.key} value={t.key}>
            {t.key}
          </option>
        ))}
      </select>
      <button type="button" disabled={!tool} onClick={() => tool && props.onAdd(tool)}>
        Add a step
      </button>
      {tool && <span className="hint">{tool.description}</span>}
    </div>
  );
}

/** What is wrong with `steps`' arguments, one line each. */
export function argumentProblems(steps: unknown, tools: ToolInfo[]): string[] {
  if (!Array.isArray(steps)) return ["the steps are a JSON array"];
  const byKey = new Map(tools.map((t) => [t.key, t]));
  return steps.flatMap((raw, i) => {
    const step = (raw ?? {}) as Step;
    const name = typeof step.id === "string" ? `step "${step.id}"` : `step ${i + 1}`;
    if (typeof step.tool !== "string") return [`${name}: names no tool`];
    // A tenant's MCP tools are asked of its servers: the server checks them.
    if (step.tool.startsWith("mcp:")) return [];
    const tool = byKey.get(step.tool);
    if (!tool) return [`${name}: no tool "${step.tool}"`];
    return violations(tool.inputSchema, step.args ?? {}, `${name} args`);
  });
}

/** The check of a draft's steps as it is typed: `steps` picks them out of the parsed draft. */
export function StepsCheck(props: { draft: string; steps: (parsed: unknown) => unknown; tools: ToolInfo[] }) {
  const { draft, steps, tools } = props;
  const found = useMemo(() => {
    try {
      return argumentProblems(steps(JSON.parse(draft)), tools);
    } catch (err) {
      return `Not JSON yet: ${String(err)}`;
    }
  }, [draft, steps, tools]);
  if (tools.length === 0) return null;
  return (
    <div aria-live="polite" data-testid="args-check">
      {typeof found === "string" ? (
        <p className="hint">{found}</p>
      ) : found.length === 0 ? (
        <p className="hint">Each step's arguments fit its tool's input schema.</p>
      ) : (
        <ul className="state error problems" aria-label="Argument problems">
          {found.map((problem) => (
            <li key={problem}>{problem}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** The steps of a draft (a JSON array of steps, or a plan definition holding one). */
export const stepsOf = {
  array: (parsed: unknown) => parsed,
  definition: (parsed: unknown) => (parsed as { steps?: unknown } | null)?.steps,
};
