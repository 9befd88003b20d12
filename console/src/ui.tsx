/** Small pieces the pages share: polling loads, a time display, an error line, a button that asks first. */
import type { ComponentChildren, InputHTMLAttributes } from 'preact';
import { useCallback, useEffect, useId, useRef, useState } from 'preact/hooks';
import { ApiError } from './api';

/** How often lists refresh themselves: decisions made elsewhere show up without a reload. */
export const POLL_INTERVAL_MS = 3000;
/** A filter typed into waits this long for the next keystroke before it loads. */
const FILTER_SETTLE_MS = 250;

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  /** Loads again now (after an action), keeping the current data on screen meanwhile. */
  reload: () => Promise<void>;
}

/**
 * Runs `load` now, whenever `key` (the filters) changes, and every POLL_INTERVAL_MS while the tab
 * is visible. What is shown stays until the new answer replaces it.
 * An answer that arrives after a newer request started is dropped, so a slow poll cannot
 * overwrite what a reload after an action just showed.
 */
export function usePolled<T>(load: () => Promise<T>, key: string): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const latest = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;

  const reload = useCallback(async () => {
    const ticket = ++latest.current;
    try {
      const result = await loadRef.current();
      if (ticket === latest.current) {
        setData(result);
        setError(undefined);
      }
    } catch (failure) {
      if (ticket === latest.current) setError(messageOf(failure));
    }
  }, []);

  const first = useRef(true);
  useEffect(() => {
    // At once when the page opens; after a filter change, once typing pauses.
    const settle = setTimeout(() => void reload(), first.current ? 0 : FILTER_SETTLE_MS);
    first.current = false;
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') void reload();
    }, POLL_INTERVAL_MS);
    return () => {
      clearTimeout(settle);
      clearInterval(timer);
    };
  }, [key, reload]);

  return { data, error, reload };
}

/**
 * What a failure says, with the API's code after it (`(FORBIDDEN)`), which tells an operator
 * reporting a problem which refusal it was; `code: false` for the message alone.
 */
export function messageOf(failure: unknown, { code = true }: { code?: boolean } = {}): string {
  if (failure instanceof ApiError)
    return code && failure.code ? `${failure.message} (${failure.code})` : failure.message;
  return failure instanceof Error ? failure.message : String(failure);
}

/**
 * The click handler of a link the console follows itself (a plain left click, no page load); a
 * click meant for a new tab or window is left to the browser, which loads the same address.
 */
export const followInConsole = (go: () => void) => (e: MouseEvent) => {
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  go();
};

/** `1 record`, `3 records`. */
export const counted = (count: number, noun: string) => `${count} ${noun}${count === 1 ? '' : 's'}`;

/** Says when a list shows only the newest part of what matched. */
export function Partial({ shown, total }: { shown: number; total: number }) {
  return total > shown ? (
    <p class="muted">
      The newest {shown} of {total}; narrow the filters to see others.
    </p>
  ) : null;
}

export function Time({ value }: { value: string | null | undefined }) {
  if (!value) return <span>—</span>;
  return <time dateTime={value}>{new Date(value).toLocaleString()}</time>;
}

export function ErrorLine({ message }: { message: string | undefined }) {
  return message ? (
    <p class="error" role="alert">
      {message}
    </p>
  ) : null;
}

export function Status({ value }: { value: string }) {
  return <span class={`status status-${value}`}>{value}</span>;
}

/**
 * Runs an action once at a time: `busy` disables its buttons while it runs, a failure is kept
 * to show, success calls `after` (a reload).
 */
export function useAction(after: () => Promise<void> | void) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const run = async (action: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await action();
      await after();
    } catch (failure) {
      setError(messageOf(failure));
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, setError, run };
}

export function Section({
  title,
  children,
  actions,
}: {
  title: string;
  children: ComponentChildren;
  actions?: ComponentChildren;
}) {
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-header">
        <h1 id="page-title" tabIndex={-1}>
          {title}
        </h1>
        {actions}
      </header>
      {children}
    </section>
  );
}

/** A list page's status filter: each status, then `all` (the empty value). */
export function StatusFilter<S extends string>(props: {
  statuses: readonly S[];
  value: S | '';
  onChange: (value: S | '') => void;
}) {
  const id = useId();
  return (
    <div class="filters">
      <span class="field">
        <label for={id}>Status</label>
        <select id={id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value as S | '')}>
          {props.statuses.map((s) => (
            <option value={s}>{s}</option>
          ))}
          <option value="">all</option>
        </select>
      </span>
    </div>
  );
}

/** A labelled filter input of a list page; it reports each keystroke (the page decides when to load). */
export function FilterField(props: {
  label: string;
  type?: 'text' | 'search' | 'datetime-local';
  value: string;
  onChange: (value: string) => void;
}) {
  const id = useId();
  return (
    <span class="field">
      <label for={id}>{props.label}</label>
      {/* Preact types each input `type` apart (a union); the three given here share value and input events. */}
      <input
        {...({ id, type: props.type ?? 'text', value: props.value } as InputHTMLAttributes<HTMLInputElement>)}
        onInput={(e) => props.onChange(e.currentTarget.value)}
      />
    </span>
  );
}

/**
 * A button that asks before it acts. The question takes the focus, on its safe answer (a second
 * Enter pressed by habit must not act); Cancel, and the end of the action, give the focus back to
 * the button. `onAsk` runs as the question opens: what the answer is about is held from then on.
 * Render it inside `.buttons`; `question` names the group for screen readers, `children` says it.
 */
export function ConfirmButton(props: {
  label: string;
  confirmLabel: string;
  question: string;
  tone: 'danger' | 'primary';
  busy: boolean;
  onAsk?: () => void;
  onConfirm: () => Promise<unknown>;
  children: ComponentChildren;
}) {
  const [confirming, setConfirming] = useState(false);
  const cancel = useRef<HTMLButtonElement>(null);
  const button = useRef<HTMLButtonElement>(null);
  const asked = useRef(false);
  useEffect(() => {
    if (confirming) cancel.current?.focus();
    else if (asked.current) button.current?.focus();
    asked.current ||= confirming;
  }, [confirming]);
  const answer = async () => {
    try {
      await props.onConfirm();
    } finally {
      setConfirming(false);
    }
  };
  if (!confirming) {
    const ask = () => {
      props.onAsk?.();
      setConfirming(true);
    };
    return (
      <button type="button" class={props.tone} ref={button} disabled={props.busy} onClick={ask}>
        {props.label}
      </button>
    );
  }
  return (
    <div class="confirm" role="group" aria-label={props.question}>
      <p>{props.children}</p>
      <div class="buttons">
        <button type="button" class={props.tone} disabled={props.busy} onClick={() => void answer()}>
          {props.confirmLabel}
        </button>
        <button type="button" ref={cancel} disabled={props.busy} onClick={() => setConfirming(false)}>
          Cancel
        </button>
      </div>
    </div>
  );
}
