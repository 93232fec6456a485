// A plan from zero: its key, intent and steps (JSON, from a template that
// runs; a picker appends a step of a tool, and the arguments are checked
// against the tools' schemas as they are typed), published as version 1;
// the server's integrity errors are shown inline, and the new plan is
// opened once published.

import { useState } from "react";
import { useMutation } from "urql";

import { ErrorBox } from "../ui";
import { StepsCheck, stepsOf, ToolPicker, useTools, withStep } from "./plan-tools";
import { graphql, type VariablesOf } from "../graphql";

const PUBLISH = graphql(`
  mutation ($input: PublishPlanInput!) {
    publishPlan(input: $input) {
      plan {
        key
        version
      }
    }
  }
`);

const TEMPLATE = JSON.stringify(
  [
    { id: "note", tool: "set_state", args: { received: true } },
    { id: "answer", tool: "agent", args: {} },
  ],
  null,
  2,
);

export function NewPlan({ onPublished }: { onPublished: (key: string) => void }) {
  const [key, setKey] = useState("");
  const [intent, setIntent] = useState("");
  const [steps, setSteps] = useState(TEMPLATE);
  const [invalid, setInvalid] = useState<string | null>(null);
  const [published, publish] = useMutation(PUBLISH);
  const tools = useTools();
  return (
    <form
      aria-label="New plan"
      className="publish"
      onSubmit={async (e) => {
        e.preventDefault();
        // The server checks the steps (its integrity errors are shown).
        let parsed: VariablesOf<typeof PUBLISH>["input"]["steps"];
        try {
          parsed = JSON.parse(steps);
        } catch (err) {
          setInvalid(`Steps are not JSON: ${String(err)}`);
          return;
        }
        setInvalid(null);
        const answer = await publish({ input: { key: key.trim(), intent: intent.trim(), steps: parsed } });
        if (answer.data) onPublished(answer.data.publishPlan.plan.key);
      }}
    >
      <h2>New plan</h2>
      <label htmlFor="new-plan-key">Key</label>
      <input id="new-plan-key" value={key} onChange={(e) => setKey(e.target.value)} placeholder="e.g. refund" />
      <label htmlFor="new-plan-intent">Intent</label>
      <input
        id="new-plan-intent"
        value={intent}
        onChange={(e) => setIntent(e.target.value)}
        placeholder="e.g. support.refund"
      />
      <label htmlFor="new-plan-steps">Steps (JSON: each an id, a tool and its args)</label>
      <textarea
        id="new-plan-steps"
        rows={12}
        value={steps}
        onChange={(e) => setSteps(e.target.value)}
        spellCheck={false}
      />
      <ToolPicker
        id="new-plan-tool"
        tools={tools}
        onAdd={(tool) => {
          try {
            const parsed: unknown = JSON.parse(steps);
            if (!Array.isArray(parsed)) throw new Error("not an array");
            setSteps(JSON.stringify(withStep(parsed, tool), null, 2));
            setInvalid(null);
          } catch {
            setInvalid("The steps are not a JSON array yet: fix them to add a step.");
          }
        }}
      />
      <StepsCheck draft={steps} steps={stepsOf.array} tools={tools} />
      <button type="submit" disabled={!key.trim() || !intent.trim() || published.fetching}>
        Publish plan
      </button>
      {invalid && <ErrorBox error={invalid} />}
      {published.error && <ErrorBox error={published.error} />}
    </form>
  );
}
