//! The `cutover.v1.Actuator` service: the mapping from tonic to `inbound`. Every handler
//! checks the caller's allow-list first (and a tool's rate limit), then validates the whole
//! request (INVALID_ARGUMENT naming the field) before `inbound` touches any state, and wraps
//! the answer.

use super::auth::{AllowLists, Role};
use crate::inbound::tools::caller_identity;
use crate::inbound::{Inbound, stream, validate};
use cutover_proto::v1::actuator_server::Actuator;
use cutover_proto::v1::{
    ActuatorMessage, GetNodeAdminStateRequest, GetNodeAdminStateResponse, ListHeldEntriesRequest,
    ListHeldEntriesResponse, NodeResult, SetNodeAdminStateRequest, SetNodeAdminStateResponse,
    SignalMessage, WatchResultsRequest,
};
use std::pin::Pin;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// The service: the allow-lists in front of what comes in.
#[derive(Clone)]
pub struct ActuatorService {
    pub inbound: Inbound,
    pub lists: AllowLists,
}

type ResultStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl ActuatorService {
    /// The per-identity tool rate limit for the caller of `request`.
    fn limit<T>(&self, request: &Request<T>, rpc: &str) -> Result<(), Status> {
        self.inbound.limit(&caller_identity(request), rpc)
    }
}

#[tonic::async_trait]
impl Actuator for ActuatorService {
    type StreamDesiredStatesStream = ResultStream<ActuatorMessage>;
    type WatchResultsStream = ResultStream<NodeResult>;

    async fn stream_desired_states(
        &self,
        request: Request<Streaming<SignalMessage>>,
    ) -> Result<Response<Self::StreamDesiredStatesStream>, Status> {
        self.lists.check(&request, Role::Signal)?;
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(stream::serve(
            self.inbound.clone(),
            request.into_inner(),
            tx,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn set_node_admin_state(
        &self,
        request: Request<SetNodeAdminStateRequest>,
    ) -> Result<Response<SetNodeAdminStateResponse>, Status> {
        self.lists.check(&request, Role::Tool)?;
        self.limit(&request, "SetNodeAdminState")?;
        let requester = caller_identity(&request);
        let req = request.into_inner();
        let set = validate::set_request(&req)?;
        let answer = self.inbound.set(set, req.reason, requester).await?;
        Ok(Response::new(answer))
    }

    async fn get_node_admin_state(
        &self,
        request: Request<GetNodeAdminStateRequest>,
    ) -> Result<Response<GetNodeAdminStateResponse>, Status> {
        self.lists.check(&request, Role::Tool)?;
        // Only a fresh read spends ARM budget; a cached answer costs nothing to limit.
        if request.get_ref().fresh {
            self.limit(&request, "GetNodeAdminState")?;
        }
        let req = request.into_inner();
        let (node, spec) = validate::get_request(&req)?;
        let answer = self.inbound.get(node, spec, req.fresh).await?;
        Ok(Response::new(answer))
    }

    async fn list_held_entries(
        &self,
        request: Request<ListHeldEntriesRequest>,
    ) -> Result<Response<ListHeldEntriesResponse>, Status> {
        // Answered from memory and the cached pools (no ARM call): not rate-limited.
        self.lists.check(&request, Role::Tool)?;
        let req = request.into_inner();
        let lb_filter = validate::list_request(&req)?;
        let nodes = self.inbound.list_held(lb_filter);
        Ok(Response::new(ListHeldEntriesResponse { nodes }))
    }

    async fn watch_results(
        &self,
        request: Request<WatchResultsRequest>,
    ) -> Result<Response<Self::WatchResultsStream>, Status> {
        self.lists.check(&request, Role::Tool)?;
        let req = request.into_inner();
        validate::watch_request(&req)?;
        Ok(Response::new(Box::pin(self.inbound.watch(req.node_name))))
    }
}
