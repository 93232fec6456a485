use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = brainstem::cli::Cli::parse();
    cli.run().await
}
