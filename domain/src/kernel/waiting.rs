//! Time spent waiting to be admitted (into a bounded queue, under a rate
//! budget) rather than working, so that waiting is never mistaken for a
//! slow call.
//!
//! The executor runs each tool call inside [`measured`]; code that waits
//! for admission wraps the wait in [`admission`], which adds the time it
//! took to the enclosing measurement. The executor then extends the step's
//! timeout by that much: 200 model steps queued for one local model wait
//! their turn instead of timing out. Outside a measurement, [`admission`]
//! only runs the wait.
//!
//! Invariant: only waits that do no work are wrapped; a call's own time
//! always counts against its timeout.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

tokio::task_local! {
    static WAITED: Waited;
}

/// The admission waits of one measured piece of work, so far.
#[derive(Clone, Debug)]
pub struct Waited(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    base: Instant,
    /// Microseconds of finished waits.
    done: AtomicU64,
    /// When the wait under way began (microseconds after `base`, plus
    /// one), or 0.
    since: AtomicU64,
}

impl Default for Waited {
    fn default() -> Self {
        Self(Arc::new(Inner {
            base: Instant::now(),
            done: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }))
    }
}

impl Waited {
    /// The total waited so far, the wait under way included.
    pub fn get(&self) -> Duration {
        let done = self.0.done.load(Ordering::Relaxed);
        let since = self.0.since.load(Ordering::Relaxed);
        let current = match since {
            0 => 0,
            s => self.micros_now().saturating_sub(s - 1),
        };
        Duration::from_micros(done + current)
    }

    fn micros_now(&self) -> u64 {
        u64::try_from(self.0.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A wait begins; `true` when this one is the wait under way (an
    /// overlapping one is counted in it).
    fn begin(&self) -> bool {
        let at = self.micros_now() + 1;
        self.0
            .since
            .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    fn end(&self) {
        let since = self.0.since.load(Ordering::Relaxed);
        if since > 0 {
            let waited = self.micros_now().saturating_sub(since - 1);
            self.0.done.fetch_add(waited, Ordering::Relaxed);
            self.0.since.store(0, Ordering::Relaxed);
        }
    }
}

/// Run `work`, adding every [`admission`] wait inside it to `waited`.
pub async fn measured<F: Future>(waited: Waited, work: F) -> F::Output {
    WAITED.scope(waited, work).await
}

/// Run `wait` (a wait for admission that does no work), counting its time
/// as waited by the enclosing [`measured`] work, if any.
pub async fn admission<F: Future>(wait: F) -> F::Output {
    /// Ends the wait even when it is dropped unfinished.
    struct Ends(Option<Waited>);
    impl Drop for Ends {
        fn drop(&mut self) {
            if let Some(waited) = &self.0 {
                waited.end();
            }
        }
    }
    let waited = WAITED.try_with(Waited::clone).ok().filter(Waited::begin);
    let _ends = Ends(waited);
    wait.await
}

/// Run `work` under a timeout of `limit` that is extended by the time
/// `work` waits for admission; its output (`None` when it ran out) and the
/// time it waited.
pub async fn timeout<F: Future>(limit: Duration, work: F) -> (Option<F::Output>, Duration) {
    let waited = Waited::default();
    let work = measured(waited.clone(), work);
    tokio::pin!(work);
    let mut deadline = Instant::now() + limit;
    let mut counted = Duration::ZERO;
    loop {
        tokio::select! {
            out = &mut work => return (Some(out), waited.get()),
            () = tokio::time::sleep_until(deadline) => {
                let total = waited.get();
                if total <= counted {
                    return (None, total);
                }
                deadline += total - counted;
                counted = total;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_admission_extends_the_timeout() {
        let work = async {
            admission(tokio::time::sleep(Duration::from_secs(50))).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            7
        };
        let (out, waited) = timeout(Duration::from_secs(10), work).await;
        assert_eq!(out, Some(7));
        assert_eq!(waited.as_secs(), 50);
    }

    #[tokio::test(start_paused = true)]
    async fn work_itself_still_times_out() {
        let work = async {
            admission(tokio::time::sleep(Duration::from_secs(3))).await;
            tokio::time::sleep(Duration::from_secs(20)).await;
        };
        assert_eq!(timeout(Duration::from_secs(10), work).await.0, None);
    }
}
