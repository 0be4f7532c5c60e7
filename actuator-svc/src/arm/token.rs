//! Where the client's bearer tokens come from. The ARM client needs only these two calls;
//! `credentials` (azure_identity 1.x, secrets and rotation) implements them above this layer.

use async_trait::async_trait;

/// A source of bearer tokens for one scope.
#[async_trait]
pub trait TokenSource: Send + Sync {
    /// A token for `scope` (cached by the source as it sees fit); the error is shown as is.
    async fn token(&self, scope: &str) -> Result<String, String>;

    /// Forgets any cached token: after a 401 the next call asks for a new one.
    fn invalidate(&self);
}
