//! Slots: how a process drives many tasks at once.
//!
//! A process has `slots` (the `executor_slots` setting): at most that many
//! tasks are driven at once, each on its own async task. One claiming loop
//! fills them: it waits for a free slot, claims the next task (the fair
//! choice of `claim`), and spawns the task's drive, which gives the slot
//! back when the task finishes, pauses or backs off. A drive waiting on a
//! tool holds no database connection and no thread, so a slot costs little
//! more than the memory of its future; the pool's connections are taken
//! only for the claim and for each commit.
//!
//! **The reserve.** When no more than `reserved_slots` are free (this one
//! included), the claim serves only tenants with no task in flight in this
//! process (`claim::Open::ToNewcomers`): a tenant whose slow steps would
//! fill every slot leaves the last ones to the others, and another
//! tenant's task starts at once instead of waiting for one of those steps
//! to end. A tenant alone therefore uses `slots - reserve` of them.
//!
//! **Wake-ups.** The claiming loop sleeps while every slot is busy, or
//! when nothing was claimable, until a task becomes runnable in this
//! process (`Tasks::wake_signal`), a drive ends (a slot is free, and a
//! limit that held a task back may have eased), or the poll interval
//! passes (work from other processes).
//!
//! **Stopping.** When `stopping` turns true the loop claims nothing more;
//! each drive commits the step in hand and returns its task to the queue
//! (`drive_leased`), and the loop returns once every drive has ended.

use tokio::{sync::Semaphore, task::JoinSet};

use super::*;

impl Executor {
    /// Start the claiming loop (none with no slots); it stops when
    /// `stopping` turns true, after the steps in hand commit.
    pub fn spawn(self) -> Option<JoinHandle<()>> {
        (self.config.slots > 0).then(|| tokio::spawn(self.fill_slots()))
    }

    /// The claiming loop: keep every free slot driving a claimed task.
    async fn fill_slots(self) {
        let slots = Arc::new(Semaphore::new(self.config.slots));
        let reserve = self.config.reserve();
        let wake = self.domain.tasks.wake_signal();
        let mut stopping = self.stopping.clone();
        let mut driving = JoinSet::new();
        tracing::debug!(worker = %self.config.worker_id, slots = self.config.slots, "executor started");
        while !self.is_stopping() {
            // Collect the drives that ended (a panic is logged, not spread).
            while let Some(ended) = driving.try_join_next() {
                if let Err(err) = ended {
                    tracing::error!(%err, "a task's drive panicked");
                }
            }
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break,
                },
                _ = stopping.changed() => continue,
            };
            let notified = wake.notified();
            // This slot and those still free: the last `reserve` of them
            // go only to tenants with nothing in flight here.
            let open = if slots.available_permits() < reserve {
                Open::ToNewcomers
            } else {
                Open::ToAll
            };
            match self.claim_one(open).await {
                Ok(Some(claimed)) => {
                    let executor = self.clone();
                    let wake = wake.clone();
                    metrics().slots_in_use.inc();
                    driving.spawn(async move {
                        if let Err(err) = executor.drive_claimed(claimed).await {
                            tracing::error!(%err, "executor error");
                        }
                        metrics().slots_in_use.dec();
                        drop(slot);
                        // A free slot, and perhaps a limit that eased.
                        wake.notify_one();
                    });
                    continue;
                }
                Ok(None) => drop(slot),
                Err(err) => {
                    drop(slot);
                    tracing::error!(%err, "claim error");
                }
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(self.config.poll) => {}
                _ = stopping.changed() => {}
            }
        }
        while let Some(ended) = driving.join_next().await {
            if let Err(err) = ended {
                tracing::error!(%err, "a task's drive panicked");
            }
        }
    }
}
