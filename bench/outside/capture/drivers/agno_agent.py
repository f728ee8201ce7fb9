"""agno: an Agent on OpenAILike with instructions and a plain Python function as its tool (agno
builds the schema from the type hints and docstring)."""
import sys

from agno.agent import Agent
from agno.models.openai.like import OpenAILike


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city (str): The city to look up, e.g. Paris.
        unit (str): Temperature unit, celsius or fahrenheit.
    """
    return f"22 degrees {unit} and sunny in {city}"


agent = Agent(model=OpenAILike(id="goldens", api_key="x", base_url=sys.argv[1]), tools=[get_weather],
              instructions="You are a helpful weather assistant. Answer briefly.")
print(agent.run("What is the weather like in Paris today?").content)
