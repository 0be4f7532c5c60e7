//! Eventually-style waits: poll a check until it yields, fail with a message after a timeout.

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 50 ms until it returns Some; fails after 30 s, naming `what`
/// ("timed out after 30s: waiting for {what}").
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
    until_ok(timeout, every, || {
        let polled = check();
        async move { polled.await.ok_or_else(|| format!("waiting for {what}")) }
    })
    .await
}

/// Polls `check` every `every` until it returns Ok; fails after `timeout` with the last Err,
/// for a check that can say what it saw (`"3 of 5 entries Down"`).
pub async fn until_ok<T, F, Fut>(timeout: Duration, every: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {timeout:?}: {last}"
            ),
        }
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
    #[should_panic(expected = "timed out after 100ms: waiting for nothing")]
    async fn fails_naming_what_it_waited_for() {
        eventually_within(
            Duration::from_millis(100),
            Duration::from_millis(10),
            "nothing",
            || async { None::<()> },
        )
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms: saw 7")]
    async fn fails_with_what_the_check_saw_last() {
        let mut n = 0;
        until_ok(
            Duration::from_millis(100),
            Duration::from_millis(10),
            || {
                n += 1;
                let seen = n.min(7);
                async move { Err::<(), _>(format!("saw {seen}")) }
            },
        )
        .await;
    }
}
