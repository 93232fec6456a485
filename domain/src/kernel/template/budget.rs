//! The memory budget of one render: every value a template creates with an
//! operator or a filter, and every byte it writes, is counted against
//! [`MAX_RENDER_BYTES`]; past it the render fails with [`exceeded`].
//!
//! Invariants:
//! - A size is checked *before* an operation that can multiply its input
//!   (`*`, `+`, `~`, `join`, `replace`) allocates, so `"x" * 400000000` is
//!   refused without building it. Other filters make at most a small
//!   multiple of what they are given, and are counted after they return.
//! - Measuring never allocates what it measures: a value's size is its
//!   `Display` form counted by a writer that stops at the budget left.
//! - The budget lives in a thread-local for the span of one synchronous
//!   render ([`Scope`]); minijinja calls the checks on that same thread.
//!   Outside a render (compiling only) nothing is counted.
//! - Filters that can make a large value from a small one in a single call
//!   (`indent`, `batch`, `slice`, `format`, `pprint`) are not offered.

use std::{
    cell::Cell,
    fmt::{self, Write as _},
    io,
    sync::LazyLock,
};

use minijinja::{
    Environment, Error, ErrorKind, Expression, Output, State, Value, context,
    value::{FunctionArgs, FunctionResult, Rest, ValueKind},
};

/// What the templates of one step (its args, or its condition) may create
/// and write in all, in bytes.
pub const MAX_RENDER_BYTES: usize = 8 << 20;

thread_local! {
    /// Bytes the current render may still create; `None` outside a render.
    static REMAINING: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A render's budget, active on this thread until dropped.
pub struct Scope {
    previous: Option<usize>,
}

impl Scope {
    pub fn enter(limit: usize) -> Self {
        Scope {
            previous: REMAINING.with(|r| r.replace(Some(limit))),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        REMAINING.with(|r| r.set(self.previous));
    }
}

/// The error of a render past its budget.
pub fn exceeded() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "template memory limit: a step's templates may create at most {} MiB",
            MAX_RENDER_BYTES >> 20
        ),
    )
}

fn remaining() -> usize {
    REMAINING.with(|r| r.get()).unwrap_or(usize::MAX)
}

/// Count `bytes` against the budget, or fail once it is spent.
pub fn charge(bytes: usize) -> Result<(), Error> {
    REMAINING.with(|r| match r.get() {
        None => Ok(()),
        Some(left) if bytes <= left => {
            r.set(Some(left - bytes));
            Ok(())
        }
        Some(_) => {
            r.set(Some(0));
            Err(exceeded())
        }
    })
}

/// Counts what is written, refusing past `limit` so that the caller stops.
struct Counter {
    count: usize,
    limit: usize,
}

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.count = self.count.saturating_add(s.len());
        if self.count > self.limit {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.count = self.count.saturating_add(buf.len());
        if self.count > self.limit {
            Err(io::Error::other("over the template memory limit"))
        } else {
            Ok(buf.len())
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The size of `value` written out, counted up to just past the budget
/// left (so a result over it is known to be over without being built).
pub fn size_of(value: &Value) -> usize {
    if let Some(s) = value.as_str() {
        return s.len();
    }
    let mut counter = Counter {
        count: 0,
        limit: remaining(),
    };
    let _ = write!(counter, "{value}");
    counter.count
}

/// Count the JSON form of a template's typed result before it is built.
pub fn charge_json(value: &Value) -> Result<(), Error> {
    let mut counter = Counter {
        count: 0,
        limit: remaining(),
    };
    let _ = serde_json::to_writer(&mut counter, value);
    charge(counter.count)
}

/// The formatter: count what an `{{ … }}` (or literal text) writes, then
/// write it as minijinja would.
pub fn format(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    charge(size_of(value))?;
    minijinja::escape_formatter(out, state, value)
}

/// minijinja's own operators, used once the size of their result is
/// known to fit. They run in a separate plain environment whose
/// expressions are compiled as usual (their operands are variables, so
/// nothing is folded).
struct Plain {
    add: Result<Expression<'static, 'static>, Error>,
    mul: Result<Expression<'static, 'static>, Error>,
}

static PLAIN_ENV: LazyLock<Environment<'static>> = LazyLock::new(Environment::empty);
static PLAIN: LazyLock<Plain> = LazyLock::new(|| Plain {
    add: PLAIN_ENV.compile_expression("a + b"),
    mul: PLAIN_ENV.compile_expression("a * b"),
});

fn apply(
    op: &Result<Expression<'static, 'static>, Error>,
    a: Value,
    b: Value,
) -> Result<Value, Error> {
    op.as_ref()
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?
        .eval(context! { a => a, b => b })
}

fn is_text_or_list(v: &Value) -> bool {
    matches!(
        v.kind(),
        ValueKind::String | ValueKind::Seq | ValueKind::Iterable
    )
}

/// `a * b`: a string or list repeated is measured first.
pub fn mul(a: Value, b: Value) -> Result<Value, Error> {
    let repeated = match (is_text_or_list(&a), is_text_or_list(&b)) {
        (true, false) => Some((&a, &b)),
        (false, true) => Some((&b, &a)),
        _ => None,
    };
    if let Some((item, times)) = repeated
        && let Some(n) = times.as_usize()
    {
        // At least one byte per repetition, so that repeating an empty
        // string a billion times is not free either.
        let each = size_of(item).max(1);
        charge(each.saturating_mul(n))?;
    }
    apply(&PLAIN.mul, a, b)
}

/// `a + b`: joining strings or lists is measured first.
pub fn add(a: Value, b: Value) -> Result<Value, Error> {
    if is_text_or_list(&a) || is_text_or_list(&b) {
        charge(size_of(&a).saturating_add(size_of(&b)))?;
    }
    apply(&PLAIN.add, a, b)
}

/// `a ~ b`: the two written out, measured first.
pub fn concat(a: Value, b: Value) -> Result<Value, Error> {
    let (left, right) = (size_of(&a), size_of(&b));
    charge(left.saturating_add(right))?;
    let mut out = String::with_capacity(left + right);
    let _ = write!(out, "{a}{b}");
    Ok(Value::from(out))
}

/// Register `f` as filter `name`, its result counted after it returns.
pub fn counted_filter<F, Rv, Args>(env: &mut Environment<'_>, name: &'static str, f: F)
where
    F: minijinja::functions::Function<Rv, Args>,
    Rv: FunctionResult,
    Args: for<'a> FunctionArgs<'a>,
{
    let inner = Value::from_function(f);
    env.add_filter(name, move |state: &mut State, args: Rest<Value>| {
        let out = inner.call(state, &args)?;
        charge(size_of(&out))?;
        Ok::<Value, Error>(out)
    });
}

/// Register `f` as filter `name`, with `estimate` (an upper bound of its
/// result's size from its arguments) counted before it runs.
pub fn checked_filter<F, Rv, Args>(
    env: &mut Environment<'_>,
    name: &'static str,
    f: F,
    estimate: fn(&[Value]) -> usize,
) where
    F: minijinja::functions::Function<Rv, Args>,
    Rv: FunctionResult,
    Args: for<'a> FunctionArgs<'a>,
{
    let inner = Value::from_function(f);
    env.add_filter(name, move |state: &mut State, args: Rest<Value>| {
        charge(estimate(&args))?;
        inner.call(state, &args)
    });
}

/// `join`: every item written out, and the separator between each two.
pub fn join_estimate(args: &[Value]) -> usize {
    let Some(items) = args.first() else {
        return 0;
    };
    let separator = args.get(1).and_then(Value::as_str).map_or(0, str::len);
    let count = items.len().unwrap_or(0);
    size_of(items).saturating_add(count.saturating_mul(separator))
}

/// `replace`: the text, with every match of `from` (an empty `from`
/// matches between every two characters) replaced by `to`.
pub fn replace_estimate(args: &[Value]) -> usize {
    let (Some(text), Some(from), Some(to)) = (
        args.first().and_then(Value::as_str),
        args.get(1).and_then(Value::as_str),
        args.get(2).and_then(Value::as_str),
    ) else {
        return args.first().map_or(0, size_of);
    };
    let matches = text.matches(from).count();
    text.len()
        .saturating_add(matches.saturating_mul(to.len().max(1)))
}
