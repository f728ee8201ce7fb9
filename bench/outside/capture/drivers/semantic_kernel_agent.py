"""Semantic Kernel: OpenAIChatCompletion with a kernel_function plugin and automatic function calling
(FunctionChoiceBehavior.Auto), a system message and a user message in a ChatHistory."""
import asyncio
import sys
from typing import Annotated

from openai import AsyncOpenAI
from semantic_kernel import Kernel
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion, OpenAIChatPromptExecutionSettings
from semantic_kernel.contents import ChatHistory
from semantic_kernel.functions import kernel_function


class WeatherPlugin:
    @kernel_function(description="Get the current weather in a city.")
    def get_weather(self, city: Annotated[str, "The city to look up, e.g. Paris."],
                    unit: Annotated[str, "Temperature unit, celsius or fahrenheit."] = "celsius") -> str:
        return f"22 degrees {unit} and sunny in {city}"


async def main() -> None:
    kernel = Kernel()
    service = OpenAIChatCompletion(ai_model_id="goldens", async_client=AsyncOpenAI(base_url=sys.argv[1], api_key="x"))
    kernel.add_service(service)
    kernel.add_plugin(WeatherPlugin(), plugin_name="weather")
    history = ChatHistory(system_message="You are a helpful weather assistant. Answer briefly.")
    history.add_user_message("What is the weather like in Paris today?")
    settings = OpenAIChatPromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
    reply = await service.get_chat_message_content(history, settings, kernel=kernel)
    print(reply)


asyncio.run(main())
