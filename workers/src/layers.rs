//! The L2 scene and L3 persona workers: consume `scene.due` / `persona.due`, sweep for owners
//! whose wake-up was lost, and edit scene documents or build personas in the file store.

use std::sync::Arc;

use anyhow::Context as _;
use shared::backends::{layer_engines, prompts_for};
use shared::config::Settings;
use shared::persona::build::{PersonaBuilder, PersonaHandler};
use shared::scene::run::{SceneHandler, SceneRunner};
use tokio_util::sync::CancellationToken;

use crate::compact::run_database_worker;

/// Runs the scene worker until `shutdown`.
pub async fn run_scene_worker(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    enabled(&settings, "scene")?;
    let files = shared::backends::connect_files(&settings, false)
        .await
        .context("open the file store")?;
    let layers = settings.layers.clone();
    let llm = settings.llm.clone();
    run_database_worker(&settings, "scene", Some(files.clone()), shutdown, move |store, bus| {
        let prompts = prompts_for(llm.as_ref(), store.clone())?;
        let (editor, _) = layer_engines(llm.as_ref(), &prompts, &layers)?;
        let runner = SceneRunner::new(store.clone(), store, files, bus, editor, layers.scene.clone());
        Ok(Arc::new(SceneHandler(runner)))
    })
    .await
}

/// Runs the persona worker until `shutdown`.
pub async fn run_persona_worker(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    enabled(&settings, "persona")?;
    let files = shared::backends::connect_files(&settings, false)
        .await
        .context("open the file store")?;
    let layers = settings.layers.clone();
    let llm = settings.llm.clone();
    run_database_worker(
        &settings,
        "persona",
        Some(files.clone()),
        shutdown,
        move |store, _bus| {
            let prompts = prompts_for(llm.as_ref(), store.clone())?;
            let (_, engine) = layer_engines(llm.as_ref(), &prompts, &layers)?;
            let builder = PersonaBuilder::new(store.clone(), store, files, engine, layers.persona.clone());
            Ok(Arc::new(PersonaHandler(builder)))
        },
    )
    .await
}

fn enabled(settings: &Settings, name: &str) -> anyhow::Result<()> {
    if !settings.layers.enabled {
        anyhow::bail!("scenes and persona are off (SEDIMENT_LAYERS=false): the {name} worker has nothing to do");
    }
    Ok(())
}
