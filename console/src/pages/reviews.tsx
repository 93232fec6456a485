// The review queue: tasks waiting for a person, with the reason and the
// proposed values; approve (with corrections as JSON) or reject (with a
// reason, after a confirmation).

import { useState } from "react";
import { useMutation, useQuery } from "urql";

import { href } from "../router";
import { Empty, ErrorBox, Json, Loading } from "../ui";

const WAITING = `query { tasks(first: 50, orderBy: CREATED_AT_DESC, filter: {statuses: [NEEDS_REVIEW, AWAITING_APPROVAL]}) {
  edges { node { id input status pendingReview { id stepId reason confidence proposed } } } } }`;
const RESUME = `mutation($input: ResumeTaskInput!) { resumeTask(input: $input) { task { id status } } }`;

interface Waiting {
  id: string;
  input: string;
  status: string;
  pendingReview: { id: string; stepId: string; reason: string; confidence: number | null; proposed: unknown } | null;
}

export function ReviewsPage() {
  const [{ data, error, fetching }, reload] = useQuery<{ tasks: { edges: { node: Waiting }[] } }>({
    query: WAITING,
    requestPolicy: "network-only",
  });
  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the review queue" />;
  const waiting = (data?.tasks.edges ?? []).map((e) => e.node).filter((t) => t.pendingReview);
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
