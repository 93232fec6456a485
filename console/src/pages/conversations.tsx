// Conversations: the tenant's conversations, newest first, 25 a page (older
// and newer by cursor), and a chat on the tenant's agent plans. Each message
// is a task (a turn) of the conversation; the answer's tokens stream in as
// they are produced, tool calls show as they start, and memory suggestions
// can be accepted. A message sent while a turn runs follows the
// conversation's strategy, shown and changed here (`multitask.tsx`).

import { useEffect, useMemo, useState } from "react";
import { useMutation, useQuery, useSubscription } from "urql";

import { mergeDelta } from "../live";
import { type Cursor, Pager, pageArgs } from "../paging";
import { usePoll } from "../poll";
import { href } from "../router";
import { MessageStrategy, type Multitask, SendError, StrategyPicker, TurnNote } from "./multitask";
import { Empty, ErrorBox, Loading, Status } from "../ui";
import { graphql, type ResultOf } from "../graphql";

const LIST = graphql(`
  query ($first: Int, $after: String, $last: Int, $before: String) {
    conversations(first: $first, after: $after, last: $last, before: $before, orderBy: CREATED_AT_DESC) {
      edges {
        node {
          id
          title
          updatedAt
        }
      }
      pageInfo {
        hasNextPage
        hasPreviousPage
        startCursor
        endCursor
      }
    }
  }
`);
const PAGE_SIZE = 25;
const START = graphql(`
  mutation ($title: String!) {
    startConversation(input: { title: $title }) {
      conversation {
        id
      }
    }
  }
`);
// A turn's first and last two events say whether it was queued or
// stopped (`multitask.tsx`).
// Asked apart from the turns: a conversation another tenant owns is an
// error that must not take the page with it.
const ANSWERING = graphql(`
  query {
    languageModel {
      provider
      model
    }
  }
`);
const TURNS = graphql(`
  query ($id: ID!) {
    conversation(id: $id) {
      id
      title
      multitask
      turns(first: 100) {
        edges {
          node {
            id
            input
            status
            error
            result {
              content
              model
              memorySuggestions
            }
            opening: events(first: 2) {
              kind
              data
            }
            closing: events(last: 2) {
              kind
              data
            }
          }
        }
      }
    }
  }
`);
const SEND = graphql(`
  mutation ($input: StartTaskInput!) {
    startTask(input: $input) {
      task {
        id
      }
    }
  }
`);
const LIVE = graphql(`
  subscription ($id: ID!) {
    conversationEvents(conversationId: $id) {
      __typename
      taskId
      seq
      kind
      stepId
      tool
      status
      summary
      ... on TokenDelta {
        offset
        text
      }
    }
  }
`);
const ACCEPT = graphql(`
  mutation ($taskId: ID!, $index: Int!) {
    acceptMemorySuggestion(input: { taskId: $taskId, index: $index }) {
      merged
    }
  }
`);

export function ConversationsPage({ id }: { id?: string }) {
  const [cursor, setCursor] = useState<Cursor>(null);
  const variables = useMemo(() => pageArgs(cursor, PAGE_SIZE), [cursor]);
  const [{ data, error, fetching }, reload] = useQuery({ query: LIST, variables, requestPolicy: "cache-and-network" });
  const [title, setTitle] = useState("");
  const [started, start] = useMutation(START);
  return (
    <section aria-labelledby="conversations-title" className="split">
      <div>
        <h1 id="conversations-title">Conversations</h1>
        <form
          className="start"
          aria-label="New conversation"
          onSubmit={async (e) => {
            e.preventDefault();
            const answer = await start({ title });
            const newId = answer.data?.startConversation.conversation.id;
            if (newId) {
              setTitle("");
              // The new conversation is the newest.
              if (cursor) setCursor(null);
              else reload({ requestPolicy: "network-only" });
              location.hash = href({ page: "conversation", id: newId });
            }
          }}
        >
          <label htmlFor="conversation-title">Title</label>
          <input id="conversation-title" value={title} onChange={(e) => setTitle(e.target.value)} />
          <button type="submit" disabled={started.fetching}>
            New conversation
          </button>
        </form>
        {started.error && <ErrorBox error={started.error} />}
        {error ? (
          <ErrorBox error={error} />
        ) : fetching && !data ? (
          <Loading what="conversations" />
        ) : !data?.conversations.edges.length ? (
          <Empty>No conversation yet.</Empty>
        ) : (
          <ul className="plain" aria-label="Conversations">
            {data.conversations.edges.map(({ node }) => (
              <li key={node.id}>
                <a
                  href={href({ page: "conversation", id: node.id })}
                  aria-current={node.id === id ? "page" : undefined}
                >
                  {node.title || "Untitled"}
                </a>
              </li>
            ))}
          </ul>
        )}
        <Pager
          label="Conversation pages"
          cursor={cursor}
          pageInfo={data?.conversations.pageInfo}
          fetching={fetching}
          onPage={setCursor}
        />
      </div>
      {id ? <Chat id={id} /> : <Empty>Pick a conversation or start one.</Empty>}
    </section>
  );
}

function Chat({ id }: { id: string }) {
  const [{ data, error, fetching }, reload] = useQuery({
    query: TURNS,
    variables: { id },
    requestPolicy: "network-only",
  });
  const [answering] = useQuery({ query: ANSWERING });
  const [live] = useSubscription<ResultOf<typeof LIVE>, LiveState>(
    { query: LIVE, variables: { id } },
    (state = { text: {}, tools: {}, changes: 0 }, event) => fold(state, event.conversationEvents),
  );
  const changes = live.data?.changes ?? 0;
  useEffect(() => {
    if (changes > 0) reload({ requestPolicy: "network-only" });
  }, [changes, reload]);
  const [planKey, setPlanKey] = useState("assistant");
  const [message, setMessage] = useState("");
  const [strategy, setStrategy] = useState<Multitask | "">("");
  const [sent, send] = useMutation(SEND);
  const [, accept] = useMutation(ACCEPT);
  const [accepted, setAccepted] = useState<Record<string, boolean>>({});
  const turns = useMemo(() => data?.conversation.turns.edges.map((e) => e.node) ?? [], [data]);
  // The stream is live only: a turn that ended before it was joined (or
  // while it was down) would wait for ever. Until every turn has settled,
  // the turns are also read again every 2 s.
  const unsettled = turns.some((t) => !["COMPLETED", "FAILED", "CANCELLED", "NEEDS_REVIEW"].includes(t.status));
  usePoll(() => reload({ requestPolicy: "network-only" }), 2000, unsettled);

  if (error) return <ErrorBox error={error} />;
  if (fetching && !data) return <Loading what="the conversation" />;
  const multitask = data?.conversation.multitask;
  return (
    <div className="chat">
      <h2>{data?.conversation.title || "Untitled"}</h2>
      {answering.data?.languageModel && (
        <p className="muted" data-testid="answering-model">
          Answers come from {answering.data.languageModel.model} ({answering.data.languageModel.provider})
        </p>
      )}
      {multitask && (
        <StrategyPicker id={id} multitask={multitask} onChanged={() => reload({ requestPolicy: "network-only" })} />
      )}
      <ol className="turns" aria-label="Turns">
        {turns.map((turn) => (
          <li key={turn.id} data-testid="turn">
            <p className="you">{turn.input}</p>
            <div className="assistant" data-testid="answer">
              {turn.result ? (
                <>
                  <p>{turn.result.content}</p>
                  <p className="muted" data-testid="turn-model">
                    {turn.result.model}
                  </p>
                </>
              ) : turn.error ? (
                <ErrorBox error={turn.error} />
              ) : (
                <p className="streaming" aria-live="polite">
                  {live.data?.text[turn.id] ?? "…"}
                </p>
              )}
              {(live.data?.tools[turn.id] ?? []).map((tool, i) => (
                <span key={i} className="tool-call">
                  {tool}
                </span>
              ))}
              <Status status={turn.status} />
              <TurnNote turn={turn} />
              {turn.result?.memorySuggestions.map((s, i) => (
                <p key={i} className="suggestion">
                  Remember: “{s}”{" "}
                  <button
                    disabled={accepted[`${turn.id}:${i}`]}
                    onClick={async () => {
                      const r = await accept({ taskId: turn.id, index: i });
                      if (!r.error) setAccepted((a) => ({ ...a, [`${turn.id}:${i}`]: true }));
                    }}
                  >
                    {accepted[`${turn.id}:${i}`] ? "Remembered" : "Remember"}
                  </button>
                </p>
              ))}
            </div>
          </li>
        ))}
      </ol>
      <form
        className="composer"
        aria-label="Composer"
        onSubmit={async (e) => {
          e.preventDefault();
          if (!message.trim()) return;
          const answer = await send({
            input: { input: message, conversationId: id, planKey, ...(strategy ? { multitask: strategy } : {}) },
          });
          if (!answer.error) {
            setMessage("");
            reload({ requestPolicy: "network-only" });
          }
        }}
      >
        <label htmlFor="chat-plan">Plan</label>
        <input id="chat-plan" value={planKey} onChange={(e) => setPlanKey(e.target.value)} />
        <label htmlFor="chat-message">Message</label>
        <input id="chat-message" value={message} onChange={(e) => setMessage(e.target.value)} />
        <MessageStrategy value={strategy} conversations={multitask} onChange={setStrategy} />
        <button type="submit" disabled={sent.fetching}>
          Send
        </button>
      </form>
      {sent.error && <SendError error={sent.error} />}
    </div>
  );
}

type LiveEvent = ResultOf<typeof LIVE>["conversationEvents"];

interface LiveState {
  /** Streamed answer text per turn. */
  text: Record<string, string>;
  /** Tools called per turn, as they start. */
  tools: Record<string, string[]>;
  /** How many times a turn changed status or was stopped (each one
   * re-reads the turns). */
  changes: number;
}

function fold(state: LiveState, e: LiveEvent): LiveState {
  if (e.__typename === "TokenDelta" && e.text !== undefined) {
    const merged = mergeDelta(state.text[e.taskId] ?? "", e.offset ?? 0, e.text);
    return merged === null ? state : { ...state, text: { ...state.text, [e.taskId]: merged } };
  }
  if (e.kind === "STEP_STARTED" && e.tool && e.tool !== "agent") {
    return { ...state, tools: { ...state.tools, [e.taskId]: [...(state.tools[e.taskId] ?? []), e.tool] } };
  }
  if (e.kind === "STATUS_CHANGED" || e.kind === "TURN_INTERRUPTED") {
    return { ...state, changes: state.changes + 1 };
  }
  return state;
}
