// The review queue, kept live by `taskUpdates`: tasks waiting for a
// person, newest first, with the reason and the
// proposed values; approve (with corrections as JSON) or reject (with a
// reason, after a confirmation).

import { useEffect, useState } from "react";
import { useMutation, useQuery, useSubscription } from "urql";

import { href } from "../router";
import { Empty, ErrorBox, Json, Loading } from "../ui";
import { graphql, type ResultOf } from "../graphql";

const WAITING = graphql(`
  query {
    tasks(first: 50, orderBy: CREATED_AT_DESC, filter: { statuses: [NEEDS_REVIEW, AWAITING_APPROVAL] }) {
      edges {
        node {
          id
          input
          status
          pendingReview {
            id
            stepId
            reason
            confidence
            proposed
          }
        }
      }
    }
  }
`);
const UPDATES = graphql(`
  subscription {
    taskUpdates {
      id
      status
    }
  }
`);
const WAITS = ["NEEDS_REVIEW", "AWAITING_APPROVAL"];
const RESUME = graphql(`
  mutation ($input: ResumeTaskInput!) {
    resumeTask(input: $input) {
      task {
        id
        status
      }
    }
  }
`);

type Waiting = ResultOf<typeof WAITING>["tasks"]["edges"][number]["node"];

export function ReviewsPage() {
  const [{ data, error, fetching }, reload] = useQuery({
    query: WAITING,
    requestPolicy: "network-only",
  });
  const [live] = useSubscription({ query: UPDATES });
  const listed = (data?.tasks.edges ?? []).map((e) => e.node);
  // A task that starts or stops waiting changes the queue: read it again.
  useEffect(() => {
    const task = live.data?.taskUpdates;
    if (!task) return;
    const shown = listed.some((t) => t.id === task.id);
    if (shown !== WAITS.includes(task.status)) reload({ requestPolicy: "network-only" });
  }, [live.data]);
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the review queue" />;
  const waiting = listed.filter((t) => t.pendingReview);
  return (
    <section aria-labelledby="reviews-title">
      <h1 id="reviews-title">Review queue</h1>
      {waiting.length === 0 ? (
        <Empty>Nothing waits for a review.</Empty>
      ) : (
        waiting.map((t) => <ReviewCard key={t.id} task={t} onDone={() => reload({ requestPolicy: "network-only" })} />)
      )}
    </section>
  );
}

function ReviewCard({ task, onDone }: { task: Waiting; onDone: () => void }) {
  const review = task.pendingReview!;
  const [corrections, setCorrections] = useState("");
  const [reason, setReason] = useState("");
  const [invalid, setInvalid] = useState<string | null>(null);
  const [result, resume] = useMutation(RESUME);
  const decide = async (decision: "APPROVE" | "REJECT") => {
    let parsed: unknown = undefined;
    if (decision === "APPROVE" && corrections.trim()) {
      try {
        parsed = JSON.parse(corrections);
      } catch {
        setInvalid("Corrections must be a JSON object.");
        return;
      }
    }
    if (decision === "REJECT" && !confirm(`Reject "${task.input || task.id}"? The task is cancelled.`)) return;
    setInvalid(null);
    const answer = await resume({
      input: {
        taskId: task.id,
        reviewId: review.id,
        decision,
        ...(parsed ? { corrections: parsed } : {}),
        ...(decision === "REJECT" && reason.trim() ? { reason: reason.trim() } : {}),
      },
    });
    if (!answer.error) onDone();
  };
  const fieldId = `corrections-${review.id}`;
  return (
    <article className="card" data-testid="review" aria-label={`Review of ${task.input || task.id}`}>
      <h2>
        <a href={href({ page: "task", id: task.id })}>{task.input || task.id}</a>
      </h2>
      <p>
        Step <code>{review.stepId}</code>: {review.reason}
        {review.confidence !== null && ` (confidence ${review.confidence.toFixed(2)})`}
      </p>
      <h3>Proposed</h3>
      <Json value={review.proposed} />
      {review.stepId === "intent_detection" && (
        <p className="hint">
          No plan matched this task's input. To run it, approve with the intent it should have, e.g.{" "}
          <code>{'{"intent": "support.refund"}'}</code>.
        </p>
      )}
      <label htmlFor={fieldId}>Corrections (JSON, optional)</label>
      <textarea id={fieldId} rows={3} value={corrections} onChange={(e) => setCorrections(e.target.value)} />
      <label htmlFor={`reason-${review.id}`}>Reason (when rejecting)</label>
      <input id={`reason-${review.id}`} value={reason} onChange={(e) => setReason(e.target.value)} />
      <div className="actions">
        <button onClick={() => decide("APPROVE")} disabled={result.fetching}>
          Approve
        </button>
        <button onClick={() => decide("REJECT")} disabled={result.fetching}>
          Reject
        </button>
      </div>
      {invalid && <ErrorBox error={invalid} />}
      {result.error && <ErrorBox error={result.error} />}
    </article>
  );
}
