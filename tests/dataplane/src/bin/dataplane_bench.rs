//! The data-plane bench (issue 28): failed new connections and broken established flows per
//! departure flow, traffic policy and mode. See tests/dataplane/README.md.

use cutover_dataplane::model::{Departure, Mode, Policy};
use cutover_dataplane::report::{Row, render_table};
use cutover_dataplane::sim::{Scenario, run_cell_mean};

fn main() {
    let mut rows = Vec::new();
    for dep in [
        Departure::Planned,
        Departure::SilentDeath,
        Departure::Spot { notice: 30.0 },
        Departure::Spot { notice: 5.0 },
    ] {
        for pol in [Policy::Cluster, Policy::Local] {
            for mode in [Mode::ProbeOnly, Mode::Kep3836, Mode::Cutover] {
                let sc = Scenario::new(dep, pol, mode);
                rows.push(Row {
                    departure: dep.to_string(),
                    policy: pol.to_string(),
                    mode: mode.to_string(),
                    result: run_cell_mean(&sc, 200),
                });
            }
        }
    }
    print!("{}", render_table(&rows, "model (virtual time)"));
}
