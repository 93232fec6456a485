// Paging a newest-first connection by cursor: which page to ask for, and
// the Newer / Older buttons. Relay's page info tells, going forward (older),
// whether more follow, and going back (newer), whether more precede; the
// other side is known from the cursor the page was reached by.

export interface PageInfo {
  hasNextPage: boolean;
  hasPreviousPage: boolean;
  startCursor: string | null;
  endCursor: string | null;
}

/** Which page: the newest, or the one after (older) or before (newer) a cursor. */
export type Cursor = { after: string } | { before: string } | null;

/** The connection's arguments for `cursor`'s page of `size`. */
export function pageArgs(cursor: Cursor, size: number) {
  return cursor && "before" in cursor
    ? { first: null, after: null, last: size, before: cursor.before }
    : { first: size, after: cursor?.after ?? null, last: null, before: null };
}

/** Whether the page shown is the newest (new rows may be put on it). */
export function isNewest(cursor: Cursor, pageInfo: PageInfo | undefined): boolean {
  return cursor === null || ("before" in cursor && pageInfo !== undefined && !pageInfo.hasPreviousPage);
}

export function Pager(props: {
  label: string;
  cursor: Cursor;
  pageInfo: PageInfo | undefined;
  fetching: boolean;
  onPage: (cursor: Cursor) => void;
}) {
  const { cursor, pageInfo, fetching, onPage } = props;
  const back = cursor !== null && "before" in cursor;
  const hasOlder = back || Boolean(pageInfo?.hasNextPage);
  const hasNewer = back ? Boolean(pageInfo?.hasPreviousPage) : cursor !== null;
  return (
    <nav className="actions" aria-label={props.label}>
      <button
        type="button"
        disabled={!hasNewer || fetching}
        onClick={() => pageInfo?.startCursor && onPage({ before: pageInfo.startCursor })}
      >
        Newer
      </button>
      <button
        type="button"
        disabled={!hasOlder || fetching}
        onClick={() => pageInfo?.endCursor && onPage({ after: pageInfo.endCursor })}
      >
        Older
      </button>
    </nav>
  );
}
