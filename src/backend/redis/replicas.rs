//! Acquisitions that wait for replicas: `WAIT` on the connection that wrote the
//! acquisition, bounded by the call's deadline.

use redis::Value;
use tokio::time::Instant;

use super::connection::Connected;
use super::{RedisBackend, classify};
use crate::backend::{FailureDetail, FailureKind};
use crate::protocol::ReplicaWait;

impl RedisBackend {
    /// `WAIT wait.replicas() wait.timeout()` on `connected`, the connection that just wrote
    /// the acquisition: how many replicas acknowledged every write made on it so far.
    pub(super) async fn wait_replicas(
        &self,
        generation: u64,
        connected: &Connected,
        wait: ReplicaWait,
        deadline: Instant,
    ) -> Result<u32, FailureDetail> {
        let millis = u64::try_from(wait.timeout().as_millis()).unwrap_or(u64::MAX);
        let mut command = redis::cmd("WAIT");
        command.arg(wait.replicas()).arg(millis);
        let mut connection = connected.connection.clone();
        let sent = tokio::time::timeout_at(deadline, connection.send_packed_command(&command));
        match sent.await {
            Ok(Ok(Value::Int(acked))) => Ok(u32::try_from(acked).unwrap_or(0)),
            Ok(Ok(Value::ServerError(e))) => Err(FailureDetail::new(
                FailureKind::ServerError,
                redis::RedisError::from(e).to_string(),
            )),
            Ok(Ok(other)) => Err(FailureDetail::new(
                FailureKind::MalformedReply,
                format!("expected the number of replicas from WAIT, got {other:?}"),
            )),
            Ok(Err(e)) => {
                self.forget_on(generation, connected, &e);
                Err(classify::command_failure(&e).detail().clone())
            }
            Err(_) => {
                self.discard(generation, connected);
                Err(FailureDetail::new(
                    FailureKind::Timeout,
                    "WAIT did not answer before the call's deadline",
                ))
            }
        }
    }
}
