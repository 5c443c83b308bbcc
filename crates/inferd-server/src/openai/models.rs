//! `GET /v1/models` and `GET /v1/models/{id}`: the one loaded model.

use axum::extract::State;
use axum::Json;

use super::types::{ModelCard, ModelList};
use crate::error::ApiError;
use crate::extract::IdPath;
use crate::state::AppState;

fn card(state: &AppState) -> ModelCard {
    let started = std::time::SystemTime::now() - state.started.elapsed();
    ModelCard {
        id: state.model_name().to_string(),
        object: "model",
        created: started
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        owned_by: "inferd",
        max_model_len: state.engine.info.max_context,
    }
}

pub async fn list(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![card(&state)],
    })
}

/// An alias answers with the served model's card.
pub async fn get(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<ModelCard>, ApiError> {
    state.check_model(&id)?;
    Ok(Json(card(&state)))
}
