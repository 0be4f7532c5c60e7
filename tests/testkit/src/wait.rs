//! Eventually-style waits: poll a check until it yields, fail with a message after a timeout.

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 50 ms until it returns Some; fails after 30 s, naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(
        Duration::from_secs(30),
        Duration::from_millis(50),
        what,
        check,
    )
    .await
}

/// Polls `check` every `every` until it returns Some; fails after `timeout`, naming `what`.
pub async fn eventually_within<T, F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn yields_the_first_some() {
        let mut n = 0;
        let got = eventually("the third poll", || {
            n += 1;
            let v = n;
            async move { (v == 3).then_some(v) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for nothing")]
    async fn fails_naming_what_it_waited_for() {
        eventually_within(
            Duration::from_millis(100),
            Duration::from_millis(10),
            "nothing",
            || async { None::<()> },
        )
        .await;
    }
}
