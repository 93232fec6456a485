//! Coalescing token deltas into frames. A model may send a delta per token,
//! hundreds a second; subscribers need far fewer messages. Deltas are
//! buffered and sent as one frame when `every` (50 ms for `llm.generate`)
//! has passed since the last frame — on the next delta, or by a timer if
//! none comes — and whatever is left at the end. The first delta goes out
//! at once, so the first words show without delay.
//!
//! A frame says where it starts: `offset` counts characters (Unicode scalar
//! values) of the step's text before it, so a subscriber can place frames
//! and drop repeats.

use std::time::Duration;

use tokio::time::Instant;

use super::{Generation, LlmError};

/// Text to publish, starting at character `offset` of the step's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub offset: usize,
    pub text: String,
}

#[derive(Debug)]
pub struct Frames {
    every: Duration,
    buffer: String,
    offset: usize,
    last_flush: Option<Instant>,
}

impl Frames {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            buffer: String::new(),
            offset: 0,
            last_flush: None,
        }
    }

    /// Add a delta at `now`; returns a frame when one is due.
    pub fn push(&mut self, delta: &str, now: Instant) -> Option<Frame> {
        self.buffer.push_str(delta);
        match self.last_flush {
            Some(last) if now < last + self.every => None,
            _ => self.flush(now),
        }
    }

    /// When the buffered text must go out, if any is buffered.
    pub fn due_at(&self) -> Option<Instant> {
        if self.buffer.is_empty() {
            None
        } else {
            Some(
                self.last_flush
                    .map_or_else(Instant::now, |l| l + self.every),
            )
        }
    }

    /// Send what is buffered.
    pub fn flush(&mut self, now: Instant) -> Option<Frame> {
        if self.buffer.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.buffer);
        let frame = Frame {
            offset: self.offset,
            text,
        };
        self.offset += frame.text.chars().count();
        self.last_flush = Some(now);
        Some(frame)
    }
}

/// Drive `generation` to its end, handing frames to `emit`. On an error the
/// text received so far is still sent, then the error is returned.
pub async fn relay(
    generation: &mut Generation,
    every: Duration,
    mut emit: impl FnMut(Frame),
) -> Result<(), LlmError> {
    let mut frames = Frames::new(every);
    let result = loop {
        let due = frames.due_at();
        tokio::select! {
            biased;
            next = generation.next_delta() => match next {
                Ok(Some(delta)) => {
                    if let Some(frame) = frames.push(&delta, Instant::now()) {
                        emit(frame);
                    }
                }
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            },
            () = sleep_until(due), if due.is_some() => {
                if let Some(frame) = frames.flush(Instant::now()) {
                    emit(frame);
                }
            }
        }
    };
    if let Some(frame) = frames.flush(Instant::now()) {
        emit(frame);
    }
    result
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use futures_util::{StreamExt, stream};

    use super::*;
    use crate::models::llm::{
        Chunk, ChunkStream, CompletionRequest, LanguageModel, LlmSettings, Message, ModelClient,
    };

    #[test]
    fn frames_hold_deltas_until_the_interval_has_passed() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut f = Frames::new(ms(50));
        assert_eq!(f.due_at(), None);
        assert_eq!(
            f.push("a", t),
            Some(Frame {
                offset: 0,
                text: "a".into()
            })
        );
        assert_eq!(f.push("b", t + ms(10)), None);
        assert_eq!(f.push("é", t + ms(49)), None);
        assert_eq!(f.due_at(), Some(t + ms(50)));
        assert_eq!(
            f.push("c", t + ms(50)),
            Some(Frame {
                offset: 1,
                text: "béc".into()
            })
        );
        assert_eq!(f.push("d", t + ms(60)), None);
        assert_eq!(
            f.flush(t + ms(61)),
            Some(Frame {
                offset: 4,
                text: "d".into()
            })
        );
        assert_eq!(f.flush(t + ms(62)), None);
    }

    /// Streams `(delay before, text)` pairs on tokio's clock.
    struct Timed(Vec<(u64, &'static str)>);

    #[async_trait]
    impl LanguageModel for Timed {
        fn provider(&self) -> &str {
            "timed"
        }
        async fn stream(
            &self,
            _request: &CompletionRequest,
        ) -> Result<ChunkStream, crate::models::llm::LlmError> {
            let items = self.0.clone();
            Ok(Box::pin(stream::iter(items).then(
                |(delay, text)| async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    Ok(Chunk::Delta(text.to_owned()))
                },
            )))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn relay_sends_a_frame_at_most_every_interval_and_the_rest_at_the_end() {
        // Deltas at 0, 10, 20, 200, 210 ms; the stream ends at 210 ms.
        let model = Timed(vec![(0, "a"), (10, "b"), (10, "c"), (180, "d"), (10, "e")]);
        let client = ModelClient::new(Arc::new(model), LlmSettings::default());
        let start = Instant::now();
        let mut generation = client
            .start(client.request(vec![Message::user("x")], None, None, None))
            .await
            .unwrap();
        let mut sent = Vec::new();
        relay(&mut generation, Duration::from_millis(50), |f| {
            sent.push((start.elapsed().as_millis(), f.offset, f.text))
        })
        .await
        .unwrap();
        assert_eq!(
            sent,
            vec![
                (0, 0, "a".to_owned()),   // the first delta at once
                (50, 1, "bc".to_owned()), // by the timer, no delta came
                (200, 3, "d".to_owned()), // 150 ms since the last frame
                (210, 4, "e".to_owned()), // the end
            ]
        );
        let text: String = sent.iter().map(|(_, _, t)| t.as_str()).collect();
        assert_eq!(text, generation.text());
    }
}
