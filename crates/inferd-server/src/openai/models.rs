//! `GET /v1/models` and `GET /v1/models/{id}`: the one loaded model.

use axum::extract::State;
use axum::Json;
use inferd_text::chat::CivilTime;

use super::types::{ModelCard, ModelList};
use crate::error::ApiError;
use crate::extract::IdPath;
use crate::state::AppState;

/// The served model's card, in OpenAI's fields and Anthropic's (one list serves both).
fn card(state: &AppState) -> ModelCard {
    let started = std::time::SystemTime::now() - state.started.elapsed();
    let created = started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    ModelCard {
        id: state.model_name().to_string(),
        object: "model",
        created,
        owned_by: "inferd",
        kind: "model",
        display_name: state.model_name().to_string(),
        created_at: CivilTime::from_unix(created as i64).format("%Y-%m-%dT%H:%M:%SZ"),
        max_model_len: state.engine.info.max_context,
    }
}

pub async fn list(State(state): State<AppState>) -> Json<ModelList> {
    let data = vec![card(&state)];
    Json(ModelList {
        object: "list",
        has_more: false,
        first_id: data.first().map(|c| c.id.clone()),
        last_id: data.last().map(|c| c.id.clone()),
        data,
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
