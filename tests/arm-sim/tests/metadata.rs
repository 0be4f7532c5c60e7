//! ARM's metadata endpoint (`/metadata/endpoints`): the simulator's own hosts, in the two
//! shapes clients read (a list for 2019-05-01, one cloud for 2022-09-01), no token needed.
#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::*;

#[tokio::test]
async fn the_metadata_names_the_simulators_hosts_in_both_shapes() {
    let sim = start("aks").await;
    let raw = Raw::new(&sim);
    let https = sim.aad_authority();
    let list = raw
        .send(
            "GET",
            "/metadata/endpoints?api-version=2019-05-01",
            &[],
            None,
        )
        .await;
    assert_eq!(list.status, 200, "{:?}", list.body);
    let clouds = list.body.as_array().unwrap();
    assert_eq!(clouds.len(), 1);
    let cloud = &clouds[0];
    assert_eq!(cloud["name"], "ArmSim");
    assert_eq!(cloud["resourceManager"], format!("{}/", sim.url()));
    assert_eq!(
        cloud["authentication"]["loginEndpoint"],
        format!("{https}/")
    );
    assert_eq!(
        cloud["authentication"]["audiences"],
        serde_json::json!([format!("{}/", sim.url())])
    );
    // 2022-09-01: the cloud itself, not a list.
    let one = raw
        .send(
            "GET",
            "/metadata/endpoints?api-version=2022-09-01",
            &[],
            None,
        )
        .await;
    assert_eq!(one.body, *cloud);
    // The audiences are those its ARM accepts, when restricted.
    sim.set_accepted_audiences(Some(vec!["https://management.stack.example/abc".into()]));
    let one = raw
        .send(
            "GET",
            "/metadata/endpoints?api-version=2022-09-01",
            &[],
            None,
        )
        .await;
    assert_eq!(
        one.body["authentication"]["audiences"],
        serde_json::json!(["https://management.stack.example/abc"])
    );
    // No api-version: ARM's 400. Not a GET: 405.
    let bare = raw.send("GET", "/metadata/endpoints", &[], None).await;
    assert_eq!(
        (bare.status, bare.code()),
        (400, "MissingApiVersionParameter")
    );
    let put = raw
        .send(
            "PUT",
            "/metadata/endpoints?api-version=2019-05-01",
            &[],
            None,
        )
        .await;
    assert_eq!(put.status, 405);
    // Logged like every other request.
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path == "/metadata/endpoints?api-version=2019-05-01")
    );
}
