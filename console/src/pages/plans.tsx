// Plans and tools: the tenant's plans with their versions and steps,
// publishing a new version (the server's integrity errors shown inline),
// and a new plan from zero (`new-plan`); two versions side by side
// (`plan-diff`). The list polls while the page is
// visible (plans have no subscription); a plan's draft is left alone.

import { useEffect, useState } from "react";
import { useMutation, useQuery } from "urql";

import { Polling, usePoll } from "../poll";
import { Empty, ErrorBox, Json, Loading, when } from "../ui";
import { NewPlan } from "./new-plan";
import { PlanDiff } from "./plan-diff";
import { StepsCheck, stepsOf, ToolPicker, useTools, withStep } from "./plan-tools";
import { graphql, type VariablesOf } from "../graphql";

const PLANS = graphql(`
  {
    plans(first: 100) {
      edges {
        node {
          id
          key
          version
          intent
          archivedAt
        }
      }
    }
  }
`);
const PLAN = graphql(`
  query ($key: String!) {
    plan(key: $key) {
      key
      version
      intent
      description
      priority
      patterns
      archivedAt
      createdBy
      createdAt
      capabilityKey
      steps {
        id
        tool
        args
        condition
        stopOnFailure
        requiresReview
        maxAttempts
        timeoutSecs
      }
      versions {
        version
        createdBy
        createdAt
        intent
        description
        priority
        patterns
        steps {
          id
          tool
          args
          condition
          stopOnFailure
          requiresReview
        }
      }
    }
  }
`);
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

export function PlansPage() {
  const [{ data, error, fetching }, reload] = useQuery({ query: PLANS, requestPolicy: "cache-and-network" });
  const [key, setKey] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const polling = usePoll(() => reload({ requestPolicy: "network-only" }));
  const open = (planKey: string) => {
    setCreating(false);
    setKey(planKey);
    reload({ requestPolicy: "network-only" });
  };
  return (
    <section aria-labelledby="plans-title" className="split">
      <div>
        <div className="heading">
          <h1 id="plans-title">Plans</h1>
          <Polling on={polling} />
        </div>
        <button type="button" onClick={() => setCreating(true)} aria-pressed={creating}>
          New plan
        </button>
        {error ? (
          <ErrorBox error={error} />
        ) : fetching && !data ? (
          <Loading what="plans" />
        ) : !data?.plans.edges.length ? (
          <Empty>No plans yet.</Empty>
        ) : (
          <ul className="plain" aria-label="Plans">
            {data.plans.edges.map(({ node }) => (
              <li key={node.id}>
                <button className="link" aria-pressed={key === node.key} onClick={() => setKey(node.key)}>
                  {node.key} v{node.version}
                </button>{" "}
                <span className="muted">
                  {node.intent}
                  {node.archivedAt && " · archived"}
                </span>
              </li>
            ))}
          </ul>
        )}
      </div>
      {creating ? (
        <NewPlan onPublished={open} />
      ) : key ? (
        <PlanDetail planKey={key} onPublished={open} />
      ) : (
        <Empty>Pick a plan to see its steps and publish a new version.</Empty>
      )}
    </section>
  );
}

function PlanDetail({ planKey, onPublished }: { planKey: string; onPublished: (key: string) => void }) {
  const [{ data, error, fetching }, reload] = useQuery({
    query: PLAN,
    variables: { key: planKey },
    requestPolicy: "network-only",
  });
  const [draft, setDraft] = useState("");
  const [invalid, setInvalid] = useState<string | null>(null);
  const [published, publish] = useMutation(PUBLISH);
  const tools = useTools();
  const plan = data?.plan;
  useEffect(() => {
    if (plan) setDraft(definitionOf(plan.key, plan));
  }, [plan]);
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the plan" />;
  if (!plan) return <Empty>No such plan.</Empty>;
  return (
    <article aria-labelledby="plan-title">
      <h2 id="plan-title">
        {plan.key} v{plan.version}
      </h2>
      <p className="facts">
        intent <code>{plan.intent}</code> · priority {plan.priority} · by {plan.createdBy} on {when(plan.createdAt)}
        {plan.capabilityKey && ` · from capability ${plan.capabilityKey}`}
        {plan.archivedAt && ` · archived ${when(plan.archivedAt)}`}
      </p>
      <table className="list" aria-label="Steps">
        <thead>
          <tr>
            <th scope="col">Step</th>
            <th scope="col">Tool</th>
            <th scope="col">Arguments</th>
            <th scope="col">Review</th>
          </tr>
        </thead>
        <tbody>
          {plan.steps.map((s) => (
            <tr key={s.id}>
              <td>{s.id}</td>
              <td>
                <code>{s.tool}</code>
              </td>
              <td>
                <Json value={s.args} />
              </td>
              <td>{s.requiresReview ? "yes" : "no"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h3>Versions</h3>
      <ol className="plain">
        {plan.versions.map((v) => (
          <li key={v.version}>
            v{v.version} by {v.createdBy}, {when(v.createdAt)}
          </li>
        ))}
      </ol>
      <PlanDiff
        // A new version starts the comparison again from the newest two.
        key={plan.version}
        versions={plan.versions.map((v) => ({ version: v.version, definition: definitionOf(plan.key, v) }))}
      />
      <form
        aria-label="Publish a new version"
        className="publish"
        onSubmit={async (e) => {
          e.preventDefault();
          // The server checks the definition (its integrity errors are shown).
          let input: VariablesOf<typeof PUBLISH>["input"];
          try {
            input = JSON.parse(draft);
          } catch (err) {
            setInvalid(`Not JSON: ${String(err)}`);
            return;
          }
          setInvalid(null);
          const answer = await publish({ input });
          if (answer.data) {
            reload({ requestPolicy: "network-only" });
            onPublished(answer.data.publishPlan.plan.key);
          }
        }}
      >
        <label htmlFor="plan-draft">Definition (JSON)</label>
        <textarea
          id="plan-draft"
          rows={14}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          spellCheck={false}
        />
        <ToolPicker
          id="plan-draft-tool"
          tools={tools}
          onAdd={(tool) => {
            try {
              const parsed = JSON.parse(draft) as { steps?: unknown };
              if (!Array.isArray(parsed.steps)) throw new Error("no steps");
              setDraft(JSON.stringify({ ...parsed, steps: withStep(parsed.steps, tool) }, null, 2));
              setInvalid(null);
            } catch {
              setInvalid("The definition is not JSON with a steps array yet: fix it to add a step.");
            }
          }}
        />
        <StepsCheck draft={draft} steps={stepsOf.definition} tools={tools} />
        {draftKey(draft) && draftKey(draft) !== plan.key && (
          <p className="hint" role="note">
            The key is now <code>{draftKey(draft)}</code>: publishing makes a new plan of that key (or a new version of
            it), and leaves <code>{plan.key}</code> as it is.
          </p>
        )}
        <button type="submit" disabled={published.fetching}>
          Publish new version
        </button>
        {invalid && <ErrorBox error={invalid} />}
        {published.error && <ErrorBox error={published.error} />}
        {published.data && !published.error && (
          <p className="state" role="status">
            Published version {published.data.publishPlan.plan.version}.
          </p>
        )}
      </form>
    </article>
  );
}

/** What a version of a plan reads back as a definition to publish, as JSON. */
function definitionOf(
  key: string,
  plan: {
    intent: string;
    description: string;
    priority: number;
    patterns: readonly string[];
    steps: readonly {
      id: string;
      tool: string;
      args: unknown;
      condition?: unknown;
      stopOnFailure: boolean;
      requiresReview: boolean;
    }[];
  },
): string {
  const definition = {
    key,
    intent: plan.intent,
    description: plan.description,
    priority: plan.priority,
    patterns: plan.patterns,
    steps: plan.steps.map((s) => ({
      id: s.id,
      tool: s.tool,
      args: s.args,
      ...(s.condition ? { condition: s.condition } : {}),
      ...(s.requiresReview ? { requiresReview: true } : {}),
      ...(s.stopOnFailure ? {} : { stopOnFailure: false }),
    })),
  };
  return JSON.stringify(definition, null, 2);
}

/** The `key` of a draft definition, if it parses. */
function draftKey(draft: string): string | null {
  try {
    const parsed = JSON.parse(draft) as { key?: unknown };
    return typeof parsed.key === "string" ? parsed.key : null;
  } catch {
    return null;
  }
}
