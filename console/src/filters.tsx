// The controls of a list's filters: a text box applied on Enter or blur,
// and a day of a date range. Each changes the URL (the list reads its
// filters from there).

import { useEffect, useState } from "react";

/** A day of a date range (the browser's date picker). */
export function DayFilter(props: { id: string; label: string; value: string; onChange: (day: string) => void }) {
  return (
    <>
      <label htmlFor={props.id}>{props.label}</label>
      <input id={props.id} type="date" value={props.value} onChange={(e) => props.onChange(e.target.value)} />
    </>
  );
}

/** A filter's text box: applied on Enter or when it loses focus. */
export function FilterText(props: { id: string; label: string; value: string; onCommit: (value: string) => void }) {
  const [text, setText] = useState(props.value);
  useEffect(() => setText(props.value), [props.value]);
  const commit = () => {
    if (text.trim() !== props.value) props.onCommit(text.trim());
  };
  return (
    <>
      <label htmlFor={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="search"
        value={text}
        onChange={(e) => setText(e.target.value)}
        onBlur={commit}
        onKeyDown={(e) => {
          if (e.key === "Enter") commit();
        }}
      />
    </>
  );
}
