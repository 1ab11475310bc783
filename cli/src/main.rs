//! `llmgov`: demo, simulate, plan, mock-server and top.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use llmgov_cli::{plan::PlanInput, server, sim, top, CliError};

/// A rate-limit governor for LLM APIs: simulator, mock provider and planner.
#[derive(Parser)]
#[command(name = "llmgov", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the seed article's batch case (1000 requests of ~2000 tokens
    /// against 60 RPM and 100k TPM) for every strategy, prints the table and
    /// writes a plot of tokens admitted per minute. Needs no network.
    Demo {
        /// Where to write the SVG plot.
        #[arg(long, default_value = "llmgov-demo.svg")]
        svg: PathBuf,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Runs a simulation scenario file (TOML; see cli/scenarios/README.md).
    Simulate {
        /// The scenario file.
        file: PathBuf,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the tokens-per-minute plot here.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Works out the sustainable request rate of a set of limits.
    // A negative value (`--rpm -1`) reaches the check that names the flag,
    // rather than being taken for an unknown flag `-1`.
    #[command(allow_negative_numbers = true)]
    Plan {
        #[command(flatten)]
        input: PlanInput,
        /// Print the plan as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Serves the provider model over HTTP on loopback: OpenAI
    /// /v1/chat/completions and Anthropic /v1/messages, plain and streamed.
    MockServer {
        /// The server's config (TOML; see cli/README.md).
        #[arg(long)]
        config: PathBuf,
        /// Port to listen on; 0 picks a free one.
        // A value starting with `-` is read as the value, so that `--port -1`
        // is refused as a port, not as an unknown flag `-1`.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        port: u16,
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
    },
    /// Shows a governor's live state, read from the JSON of its `metrics()`.
    ///
    /// Draws per scope and limit a utilisation bar, the admission counters,
    /// refusals and the queues. Reads the JSON of a governor's `metrics()`
    /// (Rust: `serde_json` of `Governor::metrics()`; Python:
    /// `json.dumps(gov.metrics())`; Node: `gov.metricsJson()`; C:
    /// `llmgov_governor_metrics_json`; Go: `MetricsJSON()`), or of a bare
    /// `snapshot()`, that an application writes to a file or serves over
    /// HTTP.
    Top {
        /// A file path, or an http:// URL serving that JSON (https is not read: no TLS).
        source: String,
        /// Draw once and exit (otherwise redraw every `--every`).
        #[arg(long)]
        once: bool,
        /// How often to redraw (longer than zero).
        #[arg(long, default_value = "1s", value_parser = redraw_period, allow_hyphen_values = true)]
        every: humantime::Duration,
    },
}

/// `top --every`: a duration longer than zero, or `top` would read its
/// source in a busy loop.
fn redraw_period(text: &str) -> Result<humantime::Duration, String> {
    let period: humantime::Duration =
        text.parse().map_err(|e| format!("not a duration ({e}); write e.g. 1s, 500ms"))?;
    if period.is_zero() {
        return Err("must be longer than zero".to_owned());
    }
    Ok(period)
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Demo { svg, json } => {
            let report = sim::run(&sim::demo_scenario())?;
            print_report(&report, json)?;
            write_plot(&report, &svg)?;
        }
        Command::Simulate { file, json, svg } => {
            let report = sim::simulate_file(&file)?;
            print_report(&report, json)?;
            if let Some(svg) = svg {
                write_plot(&report, &svg)?;
            }
        }
        Command::Plan { input, json } => {
            let plan = input.plan()?;
            if json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&plan).expect("a plan serializes")))?;
            } else {
                emit(&plan.to_string())?;
            }
        }
        Command::MockServer { config, port, host } => server::serve(&config, &host, port)?,
        Command::Top { source, once: true, .. } => {
            emit(&top::render(&top::fetch(&source)?)?)?;
        }
        // Clear the screen and home the cursor, then draw; stop once nobody
        // reads the frames any more.
        Command::Top { source, once: false, every } => {
            top::watch(&source, |frame| emit(&format!("\x1b[2J\x1b[H{frame}")), || std::thread::sleep(every.into()))?
        }
    }
    Ok(())
}

/// Writes the plot to the `--svg` path; an error names the flag and path
/// (plotters' own says only "Drawing backend error: No such file or directory").
fn write_plot(report: &sim::Report, svg: &Path) -> Result<(), CliError> {
    sim::write_svg(report, svg).map_err(|e| {
        let reason = match e {
            CliError::Plot(why) => format!("could not write the plot: {why}"),
            other => other.to_string(),
        };
        CliError::field("--svg", svg.display(), reason)
    })?;
    eprintln!("wrote {}", svg.display());
    Ok(())
}

fn print_report(report: &sim::Report, json: bool) -> Result<(), CliError> {
    if json {
        emit(&format!("{}\n", serde_json::to_string_pretty(report).expect("a report serializes")))?;
    } else {
        emit(&report.to_string())?;
    }
    Ok(())
}

/// Writes `text` to standard output; `Ok(false)` once the reader has gone.
///
/// A reader that stops early (`llmgov simulate … --json | head`) does not
/// want the rest: that is not an error, so the text is dropped and the
/// command goes on with what else it was asked to do (the SVG plot) and
/// exits with success. `print!` would panic there instead.
fn emit(text: &str) -> Result<bool, CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llmgov: error: {e}");
            ExitCode::FAILURE
        }
    }
}
