"""Settings of the command line: where the API is and which token to send."""

from pydantic_settings import BaseSettings, SettingsConfigDict


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    api_url: str = "http://127.0.0.1:8080"
    token: str = ""
