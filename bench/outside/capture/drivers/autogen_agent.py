"""AutoGen AgentChat: an AssistantAgent with a system message and a typed Python function as its tool,
on autogen-ext's OpenAIChatCompletionClient; reflect_on_tool_use sends the tool result back."""
import asyncio
import sys
from typing import Annotated

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient


async def get_weather(city: Annotated[str, "The city to look up, e.g. Paris."], unit: str = "celsius") -> str:
    """Get the current weather in a city."""
    return f"22 degrees {unit} and sunny in {city}"


async def main() -> None:
    client = OpenAIChatCompletionClient(
        model="goldens", base_url=sys.argv[1], api_key="x",
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False})
    agent = AssistantAgent("assistant", model_client=client, tools=[get_weather], reflect_on_tool_use=True,
                           system_message="You are a helpful weather assistant. Answer briefly.")
    result = await agent.run(task="What is the weather like in Paris today?")
    print(result.messages[-1].content)
    await client.close()


asyncio.run(main())
