"""The fleet's BERT-style classifier: transformers' BertForSequenceClassification
called with token ids, answering logits only (a ModelOutput otherwise). Its own
module, so that torch.package saves only this code with the model."""

import torch


class LogitsOnly(torch.nn.Module):
    def __init__(self, classifier):
        super().__init__()
        self.classifier = classifier

    def forward(self, input_ids):
        return self.classifier(input_ids=input_ids).logits
