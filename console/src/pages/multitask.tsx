// Double texting on the conversation page: what a message sent while an
// earlier turn is unfinished does (the conversation's `multitask`, which
// an operator changes here, or a strategy picked for one message), and
// what came of it, from the turns' own events: a turn queued behind
// earlier ones (`TURN_QUEUED`, stored with the turn, right after its
// "created") and a turn a newer one interrupted or rolled back
// (`TURN_INTERRUPTED`, stored as it stops, right before its last status
// change), so a turn's first two and last two events hold both. A refused
// message (`REJECT`) is the server's `CONFLICT`, said in place.

import { useEffect, useState } from "react";
import { type CombinedError, useMutation } from "urql";

import { ErrorBox } from "../ui";
import { graphql, type VariablesOf } from "../graphql";

const SET = graphql(`
  mutation ($input: SetConversationMultitaskInput!) {
    setConversationMultitask(input: $input) {
      conversation {
        id
        multitask
      }
    }
  }
`);

export type Multitask = VariablesOf<typeof SET>["input"]["multitask"];

/** Each strategy, as the picker words it. */
export const STRATEGIES: { value: Multitask; says: string }[] = [
  { value: "REJECT", says: "is refused (REJECT)" },
  { value: "ENQUEUE", says: "waits its turn (ENQUEUE)" },
  { value: "INTERRUPT", says: "interrupts it, which stays in the history (INTERRUPT)" },
  { value: "ROLLBACK", says: "interrupts it and drops it from the history (ROLLBACK)" },
];

/** The conversation's strategy, changed as it is picked. */
export function StrategyPicker({
  id,
  multitask,
  onChanged,
}: {
  id: string;
  multitask: Multitask;
  onChanged: () => void;
}) {
  const [changed, change] = useMutation(SET);
  // The pick shows from when it is made until the conversation is read
  // again with it (or the server refuses it).
  const [picked, setPicked] = useState<Multitask | null>(null);
  useEffect(() => setPicked(null), [multitask]);
  return (
    <div className="strategy">
      <label htmlFor="chat-multitask">While a turn is running, a new message</label>
      <select
        id="chat-multitask"
        value={picked ?? multitask}
        disabled={changed.fetching}
        onChange={async (e) => {
          const value = e.target.value as Multitask;
          setPicked(value);
          const answer = await change({ input: { id, multitask: value } });
          if (answer.error) setPicked(null);
          else onChanged();
        }}
      >
        {STRATEGIES.map((s) => (
          <option key={s.value} value={s.value}>
            {s.says}
          </option>
        ))}
      </select>
      {changed.error && <ErrorBox error={changed.error} />}
    </div>
  );
}

/** The strategy for one message: the conversation's unless picked. */
export function MessageStrategy({
  value,
  conversations,
  onChange,
}: {
  value: Multitask | "";
  conversations: Multitask | undefined;
  onChange: (value: Multitask | "") => void;
}) {
  return (
    <>
      <label htmlFor="chat-message-multitask">If a turn is running</label>
      <select
        id="chat-message-multitask"
        value={value}
        onChange={(e) => onChange(e.target.value as Multitask | "")}
      >
        <option value="">the conversation's{conversations && ` (${conversations})`}</option>
        {STRATEGIES.map((s) => (
          <option key={s.value} value={s.value}>
            {s.value}
          </option>
        ))}
      </select>
    </>
  );
}

/** A message the server refused: said as a refusal when the strategy
 * refused it (`CONFLICT`), as any other error otherwise. */
export function SendError({ error }: { error: CombinedError }) {
  const refused = error.graphQLErrors.some((e) => e.extensions?.code === "CONFLICT");
  if (!refused) return <ErrorBox error={error} />;
  const why = error.message.replace(/^\[GraphQL\] /, "");
  return (
    <ErrorBox
      error={`Not sent: ${why}. The message is kept: send it again once the turn has finished, or with another strategy.`}
    />
  );
}

interface TurnEvent {
  kind: string;
  data: unknown;
}

/** What a turn's first and last events say of double texting. */
export interface Turn {
  status: string;
  opening: TurnEvent[];
  closing: TurnEvent[];
}

const field = (e: TurnEvent, name: string): unknown => (e.data as Record<string, unknown> | null)?.[name];

/** A line under a turn: queued behind earlier turns while it waits, or
 * stopped by a newer turn. */
export function TurnNote({ turn }: { turn: Turn }) {
  const stopped = turn.closing.find((e) => e.kind === "TURN_INTERRUPTED");
  if (stopped) {
    const rolledBack = field(stopped, "strategy") === "ROLLBACK";
    return (
      <p className="turn-note stopped" data-testid="turn-note">
        {rolledBack
          ? "Rolled back by a newer message: left out of the history the next turns see."
          : "Interrupted by a newer message: kept in the history, marked interrupted."}
      </p>
    );
  }
  const queued = turn.opening.find((e) => e.kind === "TURN_QUEUED");
  if (queued && turn.status === "PENDING") {
    const count = (name: string) => {
      const list = field(queued, name);
      return Array.isArray(list) ? list.length : 0;
    };
    const turns = (n: number) => (n === 1 ? "the turn before it" : `${n} earlier turns`);
    const strategy = String(field(queued, "strategy"));
    return (
      <p className="turn-note" data-testid="turn-note">
        {count("stops") > 0
          ? `Waits for ${turns(count("stops"))} to stop (${strategy}).`
          : `Queued: runs after ${turns(count("after"))} (${strategy}).`}
      </p>
    );
  }
  return null;
}
