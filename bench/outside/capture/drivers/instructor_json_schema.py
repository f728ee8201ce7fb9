"""instructor, JSON_SCHEMA mode: the same pydantic response model sent as response_format
json_schema."""
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


client = instructor.from_openai(OpenAI(base_url=sys.argv[1], api_key="x"), mode=instructor.Mode.JSON_SCHEMA)
print(client.chat.completions.create(model="goldens", response_model=Weather, messages=[
    {"role": "system", "content": "You are a helpful weather assistant. Answer briefly."},
    {"role": "user", "content": "What is the weather like in Paris today?"}]))
