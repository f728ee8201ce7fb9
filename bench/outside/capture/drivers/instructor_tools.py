"""instructor, TOOLS mode: a pydantic response model sent as a forced tool (instructor builds the
schema from the model and its field descriptions). instructor_json_schema.py sends the same
model in JSON_SCHEMA mode through `ask`."""
import sys
from typing import Literal

import instructor
from openai import OpenAI
from pydantic import BaseModel, Field


class Weather(BaseModel):
    """The weather report for one city."""
    city: str = Field(description="The city, e.g. Paris.")
    temperature: float = Field(description="The temperature in degrees.")
    unit: Literal["celsius", "fahrenheit"] = "celsius"
    conditions: list[str] = Field(default_factory=list, description="Short words, e.g. sunny.")


def ask(base_url: str, mode) -> None:
    client = instructor.from_openai(OpenAI(base_url=base_url, api_key="x"), mode=mode)
    print(client.chat.completions.create(model="goldens", response_model=Weather, messages=[
        {"role": "system", "content": "You are a helpful weather assistant. Answer briefly."},
        {"role": "user", "content": "What is the weather like in Paris today?"}]))


if __name__ == "__main__":
    ask(sys.argv[1], instructor.Mode.TOOLS)
