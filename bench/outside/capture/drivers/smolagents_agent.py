"""smolagents: a ToolCallingAgent over OpenAIServerModel with a @tool function (smolagents builds the
schema from the type hints and the docstring's Args); its loop ends through its final_answer tool."""
import sys

from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: The city to look up, e.g. Paris.
        unit: Temperature unit, celsius or fahrenheit.
    """
    return f"22 degrees {unit} and sunny in {city}"


model = OpenAIServerModel(model_id="goldens", api_base=sys.argv[1], api_key="x")
agent = ToolCallingAgent(tools=[get_weather], model=model, max_steps=3,
                         instructions="You are a helpful weather assistant. Answer briefly.")
print(agent.run("What is the weather like in Paris today?"))
